#include "@DIR@/shadow"
