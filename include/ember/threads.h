// The number of threads CPU kernels use (OpenMP; defaults to the number of cores).
#pragma once

namespace ember {

int get_num_threads();
void set_num_threads(int num_threads);

}  // namespace ember
