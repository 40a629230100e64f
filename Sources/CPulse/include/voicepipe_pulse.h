/* voicepipe_pulse.h: PulseAudio (the pa_simple API and the introspection API) for voicepipe.
 * The declarations are the library's own headers; the functions voicepipe calls are defined in
 * voicepipe_pulse.c, which opens libpulse at first use (dlopen) instead of linking it. */
#pragma once
#include <stddef.h>
#include <pulse/pulseaudio.h>
#include <pulse/simple.h>
#include <pulse/error.h>

/// Loads PulseAudio's client libraries (libpulse.so.0, libpulse-simple.so.0) once per process.
/// Returns 1 when they are there; otherwise 0, with a reason naming the library and the Debian
/// package to install in `why` (when it is not NULL). Every pa_* function works without calling it
/// first: until the libraries are loaded, each fails the way the API reports failure.
int vp_pulse_load(char *why, size_t size);
