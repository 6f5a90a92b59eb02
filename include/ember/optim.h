// ember::optim: optimizers (SGD, Adam, AdamW, Adagrad, RMSprop), learning-rate schedulers and
// gradient clipping, matching torch.optim.
#pragma once

#include "ember/optim/adagrad.h"
#include "ember/optim/adam.h"
#include "ember/optim/clip_grad.h"
#include "ember/optim/lr_scheduler.h"
#include "ember/optim/optimizer.h"
#include "ember/optim/rmsprop.h"
#include "ember/optim/sgd.h"
