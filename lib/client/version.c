/* rlock_version(): the library's own version. A file of its own, outside
 * the layers: it depends on nothing but the public header. */
#include "rlock.h"

const char *rlock_version(void) { return RLOCK_VERSION_STRING; }
