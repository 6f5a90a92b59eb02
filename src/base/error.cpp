// Building ember::Error messages (ember/error.h).
#include "ember/error.h"

namespace ember::detail {

void throw_error(const std::string& message) { throw Error(message); }

}  // namespace ember::detail
