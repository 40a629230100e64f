#pragma once
/* webrtc-audio-processing is a C++ library: CEchoCancel wraps it. This module only carries the
 * library's pkg-config flags (include path, defines) and link line to the targets that use it. */
#include <stddef.h>
