// ember::nn: modules, layers, initialization and the functional forms (torch.nn).
#pragma once

#include "ember/nn/functional.h"
#include "ember/nn/init.h"
#include "ember/nn/module.h"
#include "ember/nn/modules.h"
