// world_group() of a build without MPI: always one process.
#include "train/distributed.h"

namespace glm4 {

Distributed& world_group() { return single_process_group(); }

}  // namespace glm4
