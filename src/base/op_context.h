// The name errors carry: Note [error names] in src/ops/dispatch.h. Inside a composite op's scope a
// kernel's error names the composite the user called ("[embedding] index 7 is out of bounds"),
// elsewhere the primitive itself. A per-thread variable at the bottom of the library, set by the
// ops layer and read by the kernels only when they fail.
#pragma once

#include "ember/primitives.h"

namespace ember {

// The composite op running on this thread (outermost), or null.
const char* op_context();
void set_op_context(const char* name);

// What an error raised while running `kind` should call the op.
inline const char* error_name(OpKind kind) {
  const char* context = op_context();
  return context != nullptr ? context : op_name(kind);
}

}  // namespace ember
