# The front door. `make run` and `make test` install what is missing (as root), build,
# and do their job.
BUILD      ?= build
ASAN_BUILD ?= build-asan
PLAIN_BUILD ?= build-plain
FUZZ_BUILD ?= build-fuzz
# Seconds per fuzzer: `make test` runs them briefly; longer runs: make fuzz FUZZ_TIME=1200
FUZZ_TIME  ?= 15
TSAN_BUILD ?= build-tsan
JOBS       ?= $(shell nproc 2>/dev/null || echo 2)
PREFIX     ?= /usr/local
CMAKE_FLAGS ?=
MAKEFLAGS  += --no-print-directory

.PHONY: run demo test test-machines build build-asan bench bench-large bench-w2v bench-io bench-serve install clean deps-build deps-run deps-test deps-bench fuzz fuzz-run fuzz-build

run: deps-run build
	scripts/run.sh $(BUILD)

demo: deps-build build
	./$(BUILD)/emb demo

test: deps-test
	scripts/check-format.sh
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release -DEMB_WERROR=ON -DEMB_TESTS=ON $(CMAKE_FLAGS)
	cmake --build $(BUILD) -j $(JOBS)
	cmake -S . -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=Debug -DEMB_SANITIZE=ON -DEMB_WERROR=ON -DEMB_TESTS=ON $(CMAKE_FLAGS)
	cmake --build $(ASAN_BUILD) -j $(JOBS)
	cd $(ASAN_BUILD) && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
		ctest --output-on-failure -L unit -j $(JOBS)
	cd $(ASAN_BUILD) && ctest --output-on-failure -L mpi -R test_mpi_exact -j $(JOBS)
	cmake -S . -B $(PLAIN_BUILD) -DCMAKE_BUILD_TYPE=Release -DEMB_WITH_OPENMP=OFF -DEMB_WITH_BLAS=OFF -DEMB_WERROR=ON -DEMB_TESTS=ON $(CMAKE_FLAGS)
	cmake --build $(PLAIN_BUILD) -j $(JOBS)
	cd $(PLAIN_BUILD) && ctest --output-on-failure -L unit -j $(JOBS)
	cmake -S . -B $(TSAN_BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DEMB_TSAN=ON -DEMB_WITH_OPENMP=OFF -DEMB_WITH_BLAS=OFF -DEMB_PARITY=OFF -DEMB_WERROR=ON -DEMB_TESTS=ON $(CMAKE_FLAGS)
	cmake --build $(TSAN_BUILD) -j $(JOBS) --target test_hogwild test_first_use
	cd $(TSAN_BUILD) && TSAN_OPTIONS="halt_on_error=1 exitcode=66" ctest --output-on-failure -R '^unit\.test_(hogwild|first_use)$$'
	$(MAKE) fuzz-run
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)
	/usr/bin/python3 scripts/test_machines.py $(BUILD) --jobs $(JOBS) --after-main-run

# The suites whose results can depend on the machine, again under every kernel tier
# (EMB_KERNELS=ref/avx2/auto) and OpenBLAS core type (OPENBLAS_CORETYPE=Haswell/Zen/SkylakeX)
# this CPU can run; what it cannot run is listed with the reason (scripts/test_machines.py).
# `make test` runs it after its main run, skipping the tier and core that run used.
test-machines: deps-test
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release -DEMB_WERROR=ON -DEMB_TESTS=ON $(CMAKE_FLAGS)
	cmake --build $(BUILD) -j $(JOBS)
	/usr/bin/python3 scripts/test_machines.py $(BUILD) --jobs $(JOBS)

# libFuzzer harnesses (tests/fuzz/README.md): clang, ASan+UBSan, no OpenMP/BLAS so that every
# instruction is instrumented and runs are reproducible. Fails when a fuzzer finds something.
# The compiler is the first of clang, clang-19 ... clang-14 that links a libFuzzer harness
# (scripts/find-fuzz-cc.sh, which says what to install when none does); FUZZ_CC=... chooses.
fuzz: deps-test fuzz-run

fuzz-run: fuzz-build
	tests/fuzz/run.sh $(FUZZ_BUILD) $(FUZZ_TIME)

# Configures and builds the harnesses only (scripts/fuzz-campaign.sh builds with it).
fuzz-build:
	@cc=$$(FUZZ_CC="$(FUZZ_CC)" scripts/find-fuzz-cc.sh) && echo "fuzzing compiler: $$cc" && \
	cached=$$(sed -n 's/^CMAKE_C_COMPILER:[A-Z]*=//p' $(FUZZ_BUILD)/CMakeCache.txt 2>/dev/null || true) && \
	if [ -f $(FUZZ_BUILD)/CMakeCache.txt ] && \
	   [ "$$(command -v "$$cached")" != "$$(command -v $$cc)" ]; then \
		echo "fuzzing compiler changed: reconfiguring $(FUZZ_BUILD) from scratch"; \
		rm -rf $(FUZZ_BUILD)/CMakeCache.txt $(FUZZ_BUILD)/CMakeFiles; fi && \
	cmake -S . -B $(FUZZ_BUILD) -DCMAKE_C_COMPILER=$$cc -DCMAKE_BUILD_TYPE=RelWithDebInfo \
		-DEMB_FUZZ=ON -DEMB_TESTS=OFF -DEMB_WITH_OPENMP=OFF -DEMB_WITH_BLAS=OFF -DEMB_WERROR=ON $(CMAKE_FLAGS)
	cmake --build $(FUZZ_BUILD) -j $(JOBS) --target fuzzers

build:
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release -DEMB_TESTS=OFF $(CMAKE_FLAGS)
	cmake --build $(BUILD) -j $(JOBS)

# emb against torch 1.13 at 1 and 2 threads (bench/run.py; docs/PERFORMANCE.md). JSON lines, a
# Markdown table and an SVG plot land in $(BUILD)/bench_results.*; BENCH_FLAGS="--quick" for a
# smoke run, BENCH_FLAGS="--threads 1 --reps 11 --rounds 1" etc. (3 rounds per shape by default,
# the best median of each operation counts). It writes no large files: the tables larger than
# memory (bench-large below, 45.6 GB on disk) run only when asked, with `make bench-large` or
# `make bench BENCH_LARGE=1` (then last).
BENCH_LARGE ?= 0
bench: deps-bench
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS)
	cmake --build $(BUILD) -j $(JOBS) --target all benches
	EMB_BUILD_DIR=$(BUILD) /usr/bin/python3 bench/run.py $(BENCH_FLAGS)
	/usr/bin/python3 bench/plot.py $(BUILD)/bench_results.jsonl --svg $(BUILD)/bench_results.svg --md $(BUILD)/bench_results.md
	@if [ "$(BENCH_LARGE)" = 1 ]; then EMB_BUILD_DIR=$(BUILD) /usr/bin/python3 bench/large.py $(BENCH_LARGE_FLAGS); \
	else echo "(tables larger than memory not run: make bench-large, or make bench BENCH_LARGE=1; 45.6 GB of files)"; fi

# Tables larger than memory (bench/large.py; docs/quantization.md): 100M x 64 tables in int8,
# f16 and float32 (45.6 GB of files, created once in $(BUILD)/large-tables; a file without the
# disk space for it is skipped), mapped read-only, cold and warm, against torch on the same
# files. Only on request: `make bench-large`, or `make bench BENCH_LARGE=1`.
# BENCH_LARGE_FLAGS="--qtypes int8 --threads 1" for a shorter run, "--dir DIR" to keep the
# files elsewhere.
bench-large: deps-bench
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS)
	cmake --build $(BUILD) -j $(JOBS) --target bench_large
	EMB_BUILD_DIR=$(BUILD) /usr/bin/python3 bench/large.py $(BENCH_LARGE_FLAGS)

# Word-vector training: emb train against gensim and fastText on the State of the Union corpus
# (bench/bench_word2vec.py; BENCH_W2V_FLAGS="--threads 2 --models sg" for a quicker run).
bench-w2v: deps-bench deps-run
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS)
	cmake --build $(BUILD) -j $(JOBS) --target emb
	EMB_BUILD_DIR=$(BUILD) /usr/bin/python3 bench/bench_word2vec.py $(BENCH_W2V_FLAGS)

# File-format load speed: a ~1 GB word2vec text file against gensim, binary formats against
# read() of the same bytes (bench/io.py; BENCH_IO_FLAGS="--mb 200" for a quicker run).
bench-io: deps-bench
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS)
	cmake --build $(BUILD) -j $(JOBS) --target emb bench_io
	EMB_BUILD_DIR=$(BUILD) /usr/bin/python3 bench/io.py $(BENCH_IO_FLAGS)

# emb serve under load against a Flask + gensim server on the same table and requests, with
# wrk on loopback (bench/serve.py; docs/serve.md). BENCH_SERVE_FLAGS="--seconds 4 --rows 20000"
# for a quicker run.
bench-serve: deps-bench
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS)
	cmake --build $(BUILD) -j $(JOBS) --target emb
	EMB_BUILD_DIR=$(BUILD) /usr/bin/python3 bench/serve.py $(BENCH_SERVE_FLAGS)

install: deps-build
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX=$(PREFIX) $(CMAKE_FLAGS)
	cmake --build $(BUILD) -j $(JOBS)
	cmake --install $(BUILD)

deps-build:
	@scripts/deps.sh build
deps-run:
	@scripts/deps.sh run
deps-test:
	@scripts/deps.sh test
deps-bench:
	@scripts/deps.sh bench

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(PLAIN_BUILD) $(FUZZ_BUILD) $(TSAN_BUILD)
