// The per-thread composite-op name errors carry (base/op_context.h).
#include "base/op_context.h"

namespace ember {
namespace {
thread_local const char* t_op_context = nullptr;
}  // namespace

const char* op_context() { return t_op_context; }
void set_op_context(const char* name) { t_op_context = name; }

}  // namespace ember
