// ember::nn: modules, layers (Transformer blocks included), initialization and the functional forms (torch.nn).
#pragma once

#include "ember/nn/functional.h"
#include "ember/nn/init.h"
#include "ember/nn/module.h"
#include "ember/nn/modules.h"
#include "ember/nn/quantize.h"
#include "ember/nn/transformer.h"
