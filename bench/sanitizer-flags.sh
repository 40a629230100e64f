# The build flags bench/libfuzz and bench/asan-runs.sh share (one build directory, .build-libfuzzer):
# Swift code with libFuzzer's coverage and AddressSanitizer; the C and C++ shims and C dependencies with
# AddressSanitizer and UndefinedBehaviorSanitizer (a report stops the process: no recovery); lld, as
# Debian's gold stops with an internal error on this link. Sourced, not run.
sanitizer_scratch=.build-libfuzzer
sanitizer_flags=(
  -Xswiftc -sanitize=fuzzer,address -Xswiftc -DVOICEPIPE_LIBFUZZER -Xswiftc -use-ld=lld
  -Xcc -fsanitize=address,undefined -Xcc -fno-sanitize=vptr,function -Xcc -fno-sanitize-recover=all
  -Xcxx -fsanitize=address,undefined -Xcxx -fno-sanitize=vptr,function -Xcxx -fno-sanitize-recover=all
)
