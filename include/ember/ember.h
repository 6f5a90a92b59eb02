// The umbrella header: everything a user of ember needs.
#pragma once

#include "ember/autograd.h"
#include "ember/cuda.h"
#include "ember/data.h"
#include "ember/device.h"
#include "ember/dtype.h"
#include "ember/error.h"
#include "ember/info.h"
#include "ember/io.h"
#include "ember/nn.h"
#include "ember/ops.h"
#include "ember/optim.h"
#include "ember/peaks.h"
#include "ember/profiler.h"
#include "ember/scalar.h"
#include "ember/shape.h"
#include "ember/tensor.h"
