#pragma once
#include <speex/speex_resampler.h>
#include <speex/speex_preprocess.h>
