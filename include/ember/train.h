// ember::train: what an application would otherwise write by hand around the models: checkpoints
// (one contract), the model registry, the training step builder, the training loop and the runs of
// `ember train`, the architecture search and quantizing a model file.
#pragma once

#include "ember/train/checkpoint.h"
#include "ember/train/loop.h"
#include "ember/train/nas.h"
#include "ember/train/quantize.h"
#include "ember/train/registry.h"
#include "ember/train/resume.h"
#include "ember/train/step.h"
#include "ember/train/tasks.h"
