/* voicepipe_ort.h: the part of the ONNX Runtime C ABI voicepipe uses: OrtGetApiBase and the
 * "API version 1" prefix of the OrtApi function table (slots 0..101), which ONNX Runtime keeps
 * unchanged in every release, so any libonnxruntime >= 1.0 serves. Slots voicepipe does not call
 * are declared as void*. The library is loaded at run time (vp_ort_load), so building voicepipe
 * never needs ONNX Runtime; only the silero VAD engine does, when it runs. */
#ifndef VOICEPIPE_ORT_H
#define VOICEPIPE_ORT_H
#include <stddef.h>
#include <stdint.h>
#ifdef __cplusplus
extern "C" {
#endif

typedef struct OrtEnv OrtEnv;
typedef struct OrtStatus OrtStatus;
typedef struct OrtMemoryInfo OrtMemoryInfo;
typedef struct OrtSession OrtSession;
typedef struct OrtValue OrtValue;
typedef struct OrtRunOptions OrtRunOptions;
typedef struct OrtSessionOptions OrtSessionOptions;
typedef struct OrtAllocator OrtAllocator;
typedef struct OrtTensorTypeAndShapeInfo OrtTensorTypeAndShapeInfo;

enum { ORT_LOGGING_LEVEL_VERBOSE = 0, ORT_LOGGING_LEVEL_INFO = 1, ORT_LOGGING_LEVEL_WARNING = 2,
       ORT_LOGGING_LEVEL_ERROR = 3, ORT_LOGGING_LEVEL_FATAL = 4 };
enum { ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT = 1, ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64 = 7 };
enum { OrtDeviceAllocator = 0, OrtArenaAllocator = 1 };       /* OrtAllocatorType */
enum { OrtMemTypeDefault = 0 };                               /* OrtMemType */
enum { ORT_DISABLE_ALL = 0, ORT_ENABLE_BASIC = 1, ORT_ENABLE_EXTENDED = 2, ORT_ENABLE_ALL = 99 };

typedef struct OrtApi {
  void *_s0;                                                                        /* 0 CreateStatus */
  int (*GetErrorCode)(const OrtStatus *status);                                     /* 1 */
  const char *(*GetErrorMessage)(const OrtStatus *status);                          /* 2 */
  OrtStatus *(*CreateEnv)(int log_level, const char *logid, OrtEnv **out);          /* 3 */
  void *_s4_6[3];                                                                   /* 4..6 */
  OrtStatus *(*CreateSession)(const OrtEnv *env, const char *model_path,
                              const OrtSessionOptions *options, OrtSession **out);  /* 7 */
  OrtStatus *(*CreateSessionFromArray)(const OrtEnv *env, const void *model_data, size_t model_data_length,
                              const OrtSessionOptions *options, OrtSession **out);  /* 8 */
  OrtStatus *(*Run)(OrtSession *session, const OrtRunOptions *run_options,
                    const char *const *input_names, const OrtValue *const *inputs, size_t input_len,
                    const char *const *output_names, size_t output_names_len,
                    OrtValue **outputs);                                            /* 9 */
  OrtStatus *(*CreateSessionOptions)(OrtSessionOptions **out);                      /* 10 */
  void *_s11_22[12];                                                                /* 11..22 */
  OrtStatus *(*SetSessionGraphOptimizationLevel)(OrtSessionOptions *o, int level); /* 23 */
  OrtStatus *(*SetIntraOpNumThreads)(OrtSessionOptions *o, int n);                  /* 24 */
  OrtStatus *(*SetInterOpNumThreads)(OrtSessionOptions *o, int n);                  /* 25 */
  void *_s26_29[4];                                                                 /* 26..29 */
  OrtStatus *(*SessionGetInputCount)(const OrtSession *s, size_t *out);             /* 30 */
  OrtStatus *(*SessionGetOutputCount)(const OrtSession *s, size_t *out);            /* 31 */
  void *_s32_35[4];                                                                 /* 32..35 */
  OrtStatus *(*SessionGetInputName)(const OrtSession *s, size_t i, OrtAllocator *a, char **out);  /* 36 */
  OrtStatus *(*SessionGetOutputName)(const OrtSession *s, size_t i, OrtAllocator *a, char **out); /* 37 */
  void *_s38_48[11];                                                                /* 38..48 */
  OrtStatus *(*CreateTensorWithDataAsOrtValue)(const OrtMemoryInfo *info, void *p_data, size_t p_data_len,
                              const int64_t *shape, size_t shape_len, int type,
                              OrtValue **out);                                      /* 49 */
  void *_s50;                                                                       /* 50 IsTensor */
  OrtStatus *(*GetTensorMutableData)(OrtValue *value, void **out);                  /* 51 */
  void *_s52_59[8];                                                                 /* 52..59 */
  OrtStatus *(*GetTensorElementType)(const OrtTensorTypeAndShapeInfo *info, int *out);            /* 60 */
  OrtStatus *(*GetDimensionsCount)(const OrtTensorTypeAndShapeInfo *info, size_t *out);           /* 61 */
  OrtStatus *(*GetDimensions)(const OrtTensorTypeAndShapeInfo *info, int64_t *dims, size_t n);    /* 62 */
  void *_s63;                                                                       /* 63 GetSymbolicDimensions */
  OrtStatus *(*GetTensorShapeElementCount)(const OrtTensorTypeAndShapeInfo *info, size_t *out); /* 64 */
  OrtStatus *(*GetTensorTypeAndShape)(const OrtValue *value, OrtTensorTypeAndShapeInfo **out);  /* 65 */
  void *_s66_68[3];                                                                 /* 66..68 */
  OrtStatus *(*CreateCpuMemoryInfo)(int allocator_type, int mem_type, OrtMemoryInfo **out); /* 69 */
  void *_s70_75[6];                                                                 /* 70..75 */
  OrtStatus *(*AllocatorFree)(OrtAllocator *a, void *p);                            /* 76 */
  void *_s77;                                                                       /* 77 */
  OrtStatus *(*GetAllocatorWithDefaultOptions)(OrtAllocator **out);                 /* 78 */
  void *_s79_91[13];                                                                /* 79..91 */
  void (*ReleaseEnv)(OrtEnv *);                                                     /* 92 */
  void (*ReleaseStatus)(OrtStatus *);                                               /* 93 */
  void (*ReleaseMemoryInfo)(OrtMemoryInfo *);                                       /* 94 */
  void (*ReleaseSession)(OrtSession *);                                             /* 95 */
  void (*ReleaseValue)(OrtValue *);                                                 /* 96 */
  void *_s97_98[2];                                                                 /* 97..98 */
  void (*ReleaseTensorTypeAndShapeInfo)(OrtTensorTypeAndShapeInfo *);               /* 99 */
  void (*ReleaseSessionOptions)(OrtSessionOptions *);                               /* 100 */
  void *_s101;                                                                      /* 101 ReleaseCustomOpDomain */
} OrtApi;

typedef struct OrtApiBase {
  const OrtApi *(*GetApi)(uint32_t version);
  const char *(*GetVersionString)(void);
} OrtApiBase;

/// Loads libonnxruntime from `path` (a file, or a name the dynamic loader searches for) and returns
/// its API base, or NULL with the loader's message in `error` (NUL-terminated, cut to `error_size`).
/// The library is never unloaded. Nothing links against ONNX Runtime at build time.
const OrtApiBase *vp_ort_load(const char *path, char *error, size_t error_size);

#ifdef __cplusplus
}
#endif
#endif
