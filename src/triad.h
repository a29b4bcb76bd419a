// triad: the one header a model includes. Tensors and raw ops (triad::ops), differentiable
// functions and autograd (triad::), layers (triad::nn), optimizers (triad::optim).
#pragma once

#include "autograd/checkpoint.h"
#include "autograd/engine.h"
#include "autograd/functions.h"
#include "autograd/grad_mode.h"
#include "autograd/meta.h"
#include "nn/gpt.h"
#include "nn/gpt_layers.h"
#include "nn/layers.h"
#include "nn/llama.h"
#include "nn/llama_layers.h"
#include "nn/moe.h"
#include "nn/module.h"
#include "nn/router_loss.h"
#include "nn/transformer.h"
#include "optim/clip.h"
#include "optim/loss_scaler.h"
#include "optim/optimizer.h"
#include "optim/schedule.h"
#include "tensor/ops.h"
#include "tensor/tensor.h"
