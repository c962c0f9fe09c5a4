#include "minfer/minfer.h"

#define MF_STR2(x) #x
#define MF_STR(x) MF_STR2(x)

const char *mf_version(void) {
    return MF_STR(MF_VERSION_MAJOR) "." MF_STR(MF_VERSION_MINOR) "." MF_STR(MF_VERSION_PATCH);
}

const char *mf_build_info(void) { return MF_BUILD_INFO; }
