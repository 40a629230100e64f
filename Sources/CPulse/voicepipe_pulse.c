/* PulseAudio, loaded at first use, behind the library's own declarations (voicepipe_pulse.h).
 *
 * libpulse is opened with dlopen the first time a pa_* function is called, not linked: libpulse
 * brings some thirty shared libraries (dbus, systemd, X11, libsndfile...), and every `voicepipe`
 * start paid for loading them whether or not the graph uses PulseAudio. Each function voicepipe
 * calls is defined below with its real name and prototype (the library's header is included, so the
 * compiler checks them); the definition forwards to the library's function, found with dlsym once.
 * When the library is missing, each function fails the way PulseAudio reports failure (NULL, a
 * negative number, an error code in *error), and pa_strerror names the missing library.
 *
 * The definitions are hidden (VP_LOCAL): they serve voicepipe's own code only. Were they
 * exported from the executable, they would stand in for the real functions inside every library
 * that calls them, such as ALSA's PulseAudio plugin. */
#include "voicepipe_pulse.h"
#include "vp_library.h"

#include <pthread.h>
#include <stdio.h>

/* Hidden visibility: the definitions are seen by the rest of the binary they are linked into, and by no
 * shared library (only the definitions: the headers' declarations, libc's included, stay as they are). */
#define VP_LOCAL __attribute__((visibility("hidden")))

/* The sonames (the libraries' major versions); overridable to test the missing-library path. */
#ifndef VP_PULSE_SONAME
#define VP_PULSE_SONAME "libpulse.so.0"
#endif
#ifndef VP_PULSE_SIMPLE_SONAME
#define VP_PULSE_SIMPLE_SONAME "libpulse-simple.so.0"
#endif
#define VP_PULSE_PACKAGE "libpulse0"

/* The error code the functions with an `int *error` report while the library is missing: none of
 * PulseAudio's codes means "no library", and this one falls in no special case of the callers'. */
#define VP_PULSE_MISSING PA_ERR_NOTIMPLEMENTED

static __typeof__(pa_context_connect) *p_pa_context_connect;
static __typeof__(pa_context_disconnect) *p_pa_context_disconnect;
static __typeof__(pa_context_errno) *p_pa_context_errno;
static __typeof__(pa_context_get_server_info) *p_pa_context_get_server_info;
static __typeof__(pa_context_get_sink_info_list) *p_pa_context_get_sink_info_list;
static __typeof__(pa_context_get_source_info_list) *p_pa_context_get_source_info_list;
static __typeof__(pa_context_get_state) *p_pa_context_get_state;
static __typeof__(pa_context_new) *p_pa_context_new;
static __typeof__(pa_context_unref) *p_pa_context_unref;
static __typeof__(pa_mainloop_dispatch) *p_pa_mainloop_dispatch;
static __typeof__(pa_mainloop_free) *p_pa_mainloop_free;
static __typeof__(pa_mainloop_get_api) *p_pa_mainloop_get_api;
static __typeof__(pa_mainloop_new) *p_pa_mainloop_new;
static __typeof__(pa_mainloop_poll) *p_pa_mainloop_poll;
static __typeof__(pa_mainloop_prepare) *p_pa_mainloop_prepare;
static __typeof__(pa_operation_unref) *p_pa_operation_unref;
static __typeof__(pa_strerror) *p_pa_strerror;
static __typeof__(pa_simple_drain) *p_pa_simple_drain;
static __typeof__(pa_simple_flush) *p_pa_simple_flush;
static __typeof__(pa_simple_free) *p_pa_simple_free;
static __typeof__(pa_simple_get_latency) *p_pa_simple_get_latency;
static __typeof__(pa_simple_new) *p_pa_simple_new;
static __typeof__(pa_simple_read) *p_pa_simple_read;
static __typeof__(pa_simple_write) *p_pa_simple_write;

static int pulse_loaded;
static char pulse_problem[512];

static void load_pulse(void) {
    /* libpulse-simple needs libpulse (its DT_NEEDED), which the loader finds by itself; it is opened
     * first only so that a missing libpulse is reported under its own name. */
    void *pulse = vp_library_open("PulseAudio", VP_PULSE_SONAME, VP_PULSE_PACKAGE, pulse_problem, sizeof pulse_problem);
    void *simple = pulse ? vp_library_open("PulseAudio", VP_PULSE_SIMPLE_SONAME, VP_PULSE_PACKAGE, pulse_problem, sizeof pulse_problem) : NULL;
    int ok = simple != NULL;
    VP_LIBRARY_RESOLVE(ok, pulse, pa_context_connect, "PulseAudio", VP_PULSE_SONAME, pulse_problem);
    VP_LIBRARY_RESOLVE(ok, pulse, pa_context_disconnect, "PulseAudio", VP_PULSE_SONAME, pulse_problem);
    VP_LIBRARY_RESOLVE(ok, pulse, pa_context_errno, "PulseAudio", VP_PULSE_SONAME, pulse_problem);
    VP_LIBRARY_RESOLVE(ok, pulse, pa_context_get_server_info, "PulseAudio", VP_PULSE_SONAME, pulse_problem);
    VP_LIBRARY_RESOLVE(ok, pulse, pa_context_get_sink_info_list, "PulseAudio", VP_PULSE_SONAME, pulse_problem);
    VP_LIBRARY_RESOLVE(ok, pulse, pa_context_get_source_info_list, "PulseAudio", VP_PULSE_SONAME, pulse_problem);
    VP_LIBRARY_RESOLVE(ok, pulse, pa_context_get_state, "PulseAudio", VP_PULSE_SONAME, pulse_problem);
    VP_LIBRARY_RESOLVE(ok, pulse, pa_context_new, "PulseAudio", VP_PULSE_SONAME, pulse_problem);
    VP_LIBRARY_RESOLVE(ok, pulse, pa_context_unref, "PulseAudio", VP_PULSE_SONAME, pulse_problem);
    VP_LIBRARY_RESOLVE(ok, pulse, pa_mainloop_dispatch, "PulseAudio", VP_PULSE_SONAME, pulse_problem);
    VP_LIBRARY_RESOLVE(ok, pulse, pa_mainloop_free, "PulseAudio", VP_PULSE_SONAME, pulse_problem);
    VP_LIBRARY_RESOLVE(ok, pulse, pa_mainloop_get_api, "PulseAudio", VP_PULSE_SONAME, pulse_problem);
    VP_LIBRARY_RESOLVE(ok, pulse, pa_mainloop_new, "PulseAudio", VP_PULSE_SONAME, pulse_problem);
    VP_LIBRARY_RESOLVE(ok, pulse, pa_mainloop_poll, "PulseAudio", VP_PULSE_SONAME, pulse_problem);
    VP_LIBRARY_RESOLVE(ok, pulse, pa_mainloop_prepare, "PulseAudio", VP_PULSE_SONAME, pulse_problem);
    VP_LIBRARY_RESOLVE(ok, pulse, pa_operation_unref, "PulseAudio", VP_PULSE_SONAME, pulse_problem);
    VP_LIBRARY_RESOLVE(ok, pulse, pa_strerror, "PulseAudio", VP_PULSE_SONAME, pulse_problem);
    VP_LIBRARY_RESOLVE(ok, simple, pa_simple_drain, "PulseAudio", VP_PULSE_SIMPLE_SONAME, pulse_problem);
    VP_LIBRARY_RESOLVE(ok, simple, pa_simple_flush, "PulseAudio", VP_PULSE_SIMPLE_SONAME, pulse_problem);
    VP_LIBRARY_RESOLVE(ok, simple, pa_simple_free, "PulseAudio", VP_PULSE_SIMPLE_SONAME, pulse_problem);
    VP_LIBRARY_RESOLVE(ok, simple, pa_simple_get_latency, "PulseAudio", VP_PULSE_SIMPLE_SONAME, pulse_problem);
    VP_LIBRARY_RESOLVE(ok, simple, pa_simple_new, "PulseAudio", VP_PULSE_SIMPLE_SONAME, pulse_problem);
    VP_LIBRARY_RESOLVE(ok, simple, pa_simple_read, "PulseAudio", VP_PULSE_SIMPLE_SONAME, pulse_problem);
    VP_LIBRARY_RESOLVE(ok, simple, pa_simple_write, "PulseAudio", VP_PULSE_SIMPLE_SONAME, pulse_problem);
    pulse_loaded = ok;
}

/* 1 once the libraries are loaded (the first call loads them), 0 when they cannot be. */
static int pulse_ready(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, load_pulse);
    return pulse_loaded;
}

int vp_pulse_load(char *why, size_t size) { return vp_library_status(pulse_ready(), pulse_problem, why, size); }

static void set_missing(int *error) {
    if (error) *error = VP_PULSE_MISSING;
}

/* ---- pulse/simple.h ---- */

VP_LOCAL pa_simple *pa_simple_new(const char *server, const char *name, pa_stream_direction_t dir, const char *dev,
                         const char *stream_name, const pa_sample_spec *ss, const pa_channel_map *map,
                         const pa_buffer_attr *attr, int *error) {
    if (!pulse_ready()) { set_missing(error); return NULL; }
    return p_pa_simple_new(server, name, dir, dev, stream_name, ss, map, attr, error);
}

VP_LOCAL void pa_simple_free(pa_simple *s) {
    if (pulse_ready()) p_pa_simple_free(s);
}

VP_LOCAL int pa_simple_write(pa_simple *s, const void *data, size_t bytes, int *error) {
    if (!pulse_ready()) { set_missing(error); return -1; }
    return p_pa_simple_write(s, data, bytes, error);
}

VP_LOCAL int pa_simple_drain(pa_simple *s, int *error) {
    if (!pulse_ready()) { set_missing(error); return -1; }
    return p_pa_simple_drain(s, error);
}

VP_LOCAL int pa_simple_read(pa_simple *s, void *data, size_t bytes, int *error) {
    if (!pulse_ready()) { set_missing(error); return -1; }
    return p_pa_simple_read(s, data, bytes, error);
}

VP_LOCAL pa_usec_t pa_simple_get_latency(pa_simple *s, int *error) {
    if (!pulse_ready()) { set_missing(error); return (pa_usec_t)-1; }
    return p_pa_simple_get_latency(s, error);
}

VP_LOCAL int pa_simple_flush(pa_simple *s, int *error) {
    if (!pulse_ready()) { set_missing(error); return -1; }
    return p_pa_simple_flush(s, error);
}

/* ---- pulse/error.h ---- */

VP_LOCAL const char *pa_strerror(int error) {
    if (!pulse_ready()) return pulse_problem;
    return p_pa_strerror(error);
}

/* ---- pulse/mainloop.h ---- */

VP_LOCAL pa_mainloop *pa_mainloop_new(void) {
    if (!pulse_ready()) return NULL;
    return p_pa_mainloop_new();
}

VP_LOCAL void pa_mainloop_free(pa_mainloop *m) {
    if (pulse_ready()) p_pa_mainloop_free(m);
}

VP_LOCAL int pa_mainloop_prepare(pa_mainloop *m, int timeout) {
    if (!pulse_ready()) return -1;
    return p_pa_mainloop_prepare(m, timeout);
}

VP_LOCAL int pa_mainloop_poll(pa_mainloop *m) {
    if (!pulse_ready()) return -1;
    return p_pa_mainloop_poll(m);
}

VP_LOCAL int pa_mainloop_dispatch(pa_mainloop *m) {
    if (!pulse_ready()) return -1;
    return p_pa_mainloop_dispatch(m);
}

VP_LOCAL pa_mainloop_api *pa_mainloop_get_api(pa_mainloop *m) {
    if (!pulse_ready()) return NULL;
    return p_pa_mainloop_get_api(m);
}

/* ---- pulse/context.h, pulse/introspect.h, pulse/operation.h ---- */

VP_LOCAL pa_context *pa_context_new(pa_mainloop_api *mainloop, const char *name) {
    if (!pulse_ready()) return NULL;
    return p_pa_context_new(mainloop, name);
}

VP_LOCAL void pa_context_unref(pa_context *c) {
    if (pulse_ready()) p_pa_context_unref(c);
}

VP_LOCAL int pa_context_errno(const pa_context *c) {
    if (!pulse_ready()) return VP_PULSE_MISSING;
    return p_pa_context_errno(c);
}

VP_LOCAL pa_context_state_t pa_context_get_state(const pa_context *c) {
    if (!pulse_ready()) return PA_CONTEXT_FAILED;
    return p_pa_context_get_state(c);
}

VP_LOCAL int pa_context_connect(pa_context *c, const char *server, pa_context_flags_t flags, const pa_spawn_api *api) {
    if (!pulse_ready()) return -1;
    return p_pa_context_connect(c, server, flags, api);
}

VP_LOCAL void pa_context_disconnect(pa_context *c) {
    if (pulse_ready()) p_pa_context_disconnect(c);
}

VP_LOCAL pa_operation *pa_context_get_server_info(pa_context *c, pa_server_info_cb_t cb, void *userdata) {
    if (!pulse_ready()) return NULL;
    return p_pa_context_get_server_info(c, cb, userdata);
}

VP_LOCAL pa_operation *pa_context_get_sink_info_list(pa_context *c, pa_sink_info_cb_t cb, void *userdata) {
    if (!pulse_ready()) return NULL;
    return p_pa_context_get_sink_info_list(c, cb, userdata);
}

VP_LOCAL pa_operation *pa_context_get_source_info_list(pa_context *c, pa_source_info_cb_t cb, void *userdata) {
    if (!pulse_ready()) return NULL;
    return p_pa_context_get_source_info_list(c, cb, userdata);
}

VP_LOCAL void pa_operation_unref(pa_operation *o) {
    if (pulse_ready()) p_pa_operation_unref(o);
}
