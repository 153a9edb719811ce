/* emb/word2vec.h: learning word vectors from raw text — skip-gram and CBOW with negative
 * sampling, frequent-word subsampling, a dynamic window and a linearly decaying learning
 * rate, as the word2vec tool, gensim and fastText train them (docs/word2vec.md).
 *
 *   emb_w2v_options o = emb_w2v_options_default(EMB_W2V_SKIPGRAM);
 *   emb_w2v *w;
 *   emb_w2v_create_from_file(&o, "corpus.txt", &w);    // one pass: vocabulary + token ids
 *   emb_w2v_train(w, progress, NULL);                  // epochs over the ids, o.threads
 *   emb_tensor vectors; emb_w2v_vectors(w, &vectors);  // [vocab size, dim], row i = word i
 *   const emb_vocab *words = emb_w2v_vocab(w);
 *   emb_w2v_free(w);
 *
 * The tables are emb embeddings (emb_w2v_input_embedding): the input vectors are what the
 * tools save; the output (negative-sampling) vectors are kept for checkpoints.
 */
#ifndef EMB_WORD2VEC_H
#define EMB_WORD2VEC_H

#include <stdio.h>

#include "core.h"
#include "embedding.h"
#include "fasttext.h"
#include "phrases.h"
#include "vocab.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum emb_w2v_model {
    EMB_W2V_SKIPGRAM = 0,
    EMB_W2V_CBOW = 1,
} emb_w2v_model;

/* Training settings. emb_w2v_options_default(model) gives the word2vec tool's defaults:
 * dim 100, window 5, negative 5, sample 1e-3, min_count 5, epochs 5, alpha 0.025 for
 * skip-gram and 0.05 for CBOW, min_alpha = alpha * 1e-4, cbow_mean true, seed 1; and, unlike
 * the word2vec tool, shared_negatives true for skip-gram. */
typedef struct emb_w2v_options {
    emb_w2v_model model;
    int64_t dim;           /* vector size, >= 1 */
    int window;            /* maximum distance to a context word, >= 1; each center word
                              draws its effective window uniformly from [1, window] */
    int negative;          /* negative samples per example, >= 1 (hierarchical softmax is
                              not provided) */
    double sample;         /* subsampling threshold (0: off): a word of frequency f is kept
                              with probability (sqrt(f / sample) + 1) * sample / f */
    int64_t min_count;     /* words seen fewer times are dropped, >= 1 */
    int64_t max_vocab;     /* keep at most this many (most frequent) words; 0: no limit */
    int epochs;            /* >= 1 */
    double alpha;          /* initial learning rate, in (0, 1] */
    double min_alpha;      /* final learning rate, in [0, alpha] */
    bool cbow_mean;        /* CBOW: average the context vectors (true) or sum them */
    int threads;           /* training threads; 0: emb_get_num_threads() */
    int lanes;             /* the parts the corpus is cut into, each with its own position and
                              random numbers, which the threads take in turn round after
                              round (so a thread that runs slower takes fewer); 0: 1 with one
                              thread, else 4 per thread; in [0, 4096]. A checkpoint holds its
                              run's lanes, and a resumed run keeps them (docs/word2vec.md,
                              "Threads") */
    uint64_t seed;         /* initialisation and sampling */
    bool lowercase;        /* lowercase tokens as Python's str.lower() (docs/word2vec.md) */
    bool strip_punct;      /* strip leading and trailing ASCII punctuation from tokens */
    int64_t max_sentence;  /* a line longer than this many tokens is cut into pieces; 1000;
                              in [1, 2^31 - 1] */
    bool shared_negatives; /* skip-gram: one draw of negatives per window, shared by its
                              context words (faster, as accurate over seeds; the default for
                              skip-gram); false: a draw per (center, context) pair, as the
                              word2vec tool and fastText do. CBOW draws once a window
                              either way */
    bool compute_loss;     /* report the training loss to the progress callback (costs a second
                              pass over each step's dot products; the vectors are the same
                              bits with or without it); false by default, as in gensim */
    bool lenient;          /* a token that is not valid UTF-8 or longer than EMB_VOCAB_MAX_WORD
                              bytes is skipped and counted (emb_w2v_skipped) instead of being
                              an error */
    /* Subwords (fastText): with maxn > 0, a word's input vector is the mean of its own row
     * and the rows of its character n-grams of minn..maxn characters, hashed into `bucket`
     * shared rows (emb/fasttext.h), and each update goes to all of them, as fastText
     * trains; every word, seen or not, then has a vector (emb_w2v_word_vector). Defaults:
     * maxn 0 (off), minn 3, bucket 2,000,000 (fastText's with maxn 6). */
    int minn, maxn; /* maxn in [0, 100]; with maxn > 0, minn in [1, maxn] */
    int64_t bucket; /* with maxn > 0: in [1, 2^31 - 1 - vocabulary size] */
    /* Phrases (gensim's Phrases, emb/phrases.h): with phrases > 0, emb_w2v_create_from_file
     * learns bigram phrases from the corpus and trains on its text with each detected pair
     * joined by the delimiter ("new york" -> "new_york", one token), the text
     * emb_phrases_apply writes, without writing it: each pass reads the file once to count,
     * then the vocabulary pass applies every pass line by line. A second pass learns from the
     * first one's text (phrases of up to 4 words), as gensim's Phrases applied twice.
     * Defaults: phrases 0 (off), min_count 5, threshold 10, delimiter "_", the default
     * scorer (gensim's). The corpus may be any that emb_w2v_create_from_files reads (stdin is
     * copied to a temporary file, as emb_phrases_rewrite_files does). Not with
     * emb_w2v_create_from_stream, _from_ids, _with_vocab or emb_w2v_continue. */
    int phrases;                /* passes, in [0, 8] */
    int64_t phrases_min_count;  /* with phrases > 0: >= 1 */
    double phrases_threshold;   /* with phrases > 0: a number; in [-1, 1] with npmi */
    char phrases_delimiter[17]; /* with phrases > 0: 1 to 16 bytes, no whitespace */
    int phrases_scoring;        /* with phrases > 0: EMB_PHRASES_DEFAULT or EMB_PHRASES_NPMI
                                   (emb/phrases.h) */
} emb_w2v_options;

EMB_API emb_w2v_options emb_w2v_options_default(emb_w2v_model model);

/* Checks the options; the message names the first bad field. Errors: EMB_ERR_NULL,
 * EMB_ERR_INVALID. */
EMB_API emb_status emb_w2v_options_check(const emb_w2v_options *opts);

/* A training run: the vocabulary, the corpus as token ids, both tables and the progress.
 * Opaque; single-threaded (emb_w2v_train runs its own threads). */
typedef struct emb_w2v emb_w2v;

/* Reads a corpus in one streaming pass (UTF-8 text; tokens are separated by ASCII
 * whitespace, a line ends a sentence), counts the words, keeps those seen at least
 * min_count times (the max_vocab most frequent), orders them by count (descending; ties in
 * order of first appearance), and keeps the corpus as int32 token ids (4 bytes per kept
 * token: dropped words are not stored) in a temporary file in TMPDIR (default /tmp; it has
 * no name in the folder, so nothing is left behind), read back through small buffers
 * while training: memory does not grow with the corpus. Then creates the tables: input
 * vectors uniform in [-0.5/dim, 0.5/dim) from the seed, output vectors zero.
 * path "-" reads stdin. Errors (*out untouched): EMB_ERR_NULL, EMB_ERR_INVALID (options),
 * EMB_ERR_IO (cannot open or read: the message names the file; cannot create or write
 * the temporary file: the message names the folder), EMB_ERR_FORMAT (not
 * UTF-8: "corpus.txt:12: invalid UTF-8 in token ..."; no token at all: "corpus is empty";
 * no word seen min_count times: "no word occurs at least 5 times (min_count) ..."),
 * EMB_ERR_NOMEM, EMB_ERR_OVERFLOW (more than 2^31 - 1 distinct words, or tokens x epochs
 * beyond 2^63 - 1). EMB_ERR_IO also for a character device that is not a terminal
 * (/dev/zero has no end). A directory is read as its files and compressed data is
 * decompressed, as emb_w2v_create_from_files says. */
EMB_API emb_status emb_w2v_create_from_file(const emb_w2v_options *opts, const char *path,
                                            emb_w2v **out);
/* The same over several paths read one after the other, as if concatenated with a line end
 * between two files (the end of a file ends a sentence): regular files, directories (their
 * regular files, recursively, in byte order of the path names; hidden names, starting with
 * '.', and what is not a regular file are skipped; a symbolic link to a regular file is read)
 * and "-" for stdin (at most once). Every file, whatever its name, is read as gzip, bzip2, xz
 * or zstd data when it starts with that format's magic bytes (concatenated members, streams
 * and frames are read whole, as zcat does), else as plain text. Errors: as
 * emb_w2v_create_from_file, EMB_ERR_INVALID (n == 0, "-" twice), EMB_ERR_IO (a directory
 * without files), EMB_ERR_FORMAT (corrupt or truncated compressed data: the message names
 * the file and the byte offset in the compressed file), EMB_ERR_UNSUPPORTED (a compression
 * this build of emb has no library for). emb_w2v_create_from_file(o, p, out) is
 * emb_w2v_create_from_files(o, &p, 1, out). */
EMB_API emb_status emb_w2v_create_from_files(const emb_w2v_options *opts, const char *const *paths,
                                             size_t n, emb_w2v **out);
/* The same from an open stream (read to its end; not closed; compressed data recognised as
 * by emb_w2v_create_from_files). name is used in messages. */
EMB_API emb_status emb_w2v_create_from_stream(const emb_w2v_options *opts, FILE *f,
                                              const char *name, emb_w2v **out);
/* The same from a vocabulary (copied; counts used for subsampling and negative sampling)
 * and token ids ids[0..n) in [0, vocab size) or -1 for a sentence end (copied, and kept in
 * memory). */
EMB_API emb_status emb_w2v_create_from_ids(const emb_w2v_options *opts, const emb_vocab *vocab,
                                           const int32_t *ids, int64_t n, emb_w2v **out);
EMB_API void emb_w2v_free(emb_w2v *w);

/* What a progress callback sees. words_done counts corpus tokens processed (before
 * subsampling) over all epochs; words_total = epochs * corpus tokens. */
typedef struct emb_w2v_progress {
    int64_t words_done;
    int64_t words_total;
    int epoch;               /* 0-based epoch of the next word */
    double alpha;            /* current learning rate */
    double seconds;          /* wall time since this emb_w2v_train call began */
    int64_t words_done_here; /* of words_done, those processed by this emb_w2v_train call (a
                                resumed run's speed is words_done_here / seconds) */
    /* With options.compute_loss: the loss of the current epoch so far (since it began, or
     * since this run was resumed or continued within it), the sum over every trained
     * (input, target) term of -log sigmoid(score) for the true word and -log
     * sigmoid(-score) for each negative, scores from the rows as each step starts
     * (docs/word2vec.md, "Loss"); loss_examples counts the true-word terms in it (skip-gram:
     * (center, context) pairs; CBOW: windows). 0 and 0 without compute_loss. */
    double loss;
    int64_t loss_examples;
} emb_w2v_progress;

/* Called from the calling thread between rounds: with one thread after every round (16,384
 * tokens' worth of work), with T threads after every 8th round of 16,384 tokens' worth per
 * thread and at the end of each epoch (when the threads' copies are merged whole, so that the
 * tables then hold every update, as a checkpoint written from the callback must); return
 * non-zero to stop training (emb_w2v_train then returns EMB_ERR_CANCELLED, and the run can
 * be continued by calling emb_w2v_train again). */
typedef int (*emb_w2v_progress_fn)(const emb_w2v_progress *p, void *user);

/* Trains until every epoch is done (continuing a run that was cancelled or resumed from a
 * checkpoint). With threads == 1 the result depends only on the corpus, the options and
 * the seed (and lanes, 1 by default with one thread): two runs give bit-identical vectors,
 * and a run resumed from a checkpoint gives the same vectors as an uninterrupted one. With
 * more threads, the threads take the lanes in turn every round (a slower thread takes
 * fewer), each thread trains its own copy of both tables' most frequent rows (the 2,048 most
 * frequent merged after every round of 16,384 tokens per thread, the others up to the 8,192nd
 * every 8 rounds), the other rows are updated without locks (Hogwild, as the word2vec tool,
 * gensim and fastText do; docs/word2vec.md, "Threads"), and results vary slightly from run to
 * run. progress may be NULL.
 * Errors: EMB_ERR_NULL, EMB_ERR_CANCELLED, EMB_ERR_NOMEM, EMB_ERR_NUMERIC (the training
 * diverged: a score or a vector became NaN or infinite; the message names the vector and
 * the run stays stopped: later calls return the same error, and it cannot be
 * checkpointed). */
EMB_API emb_status emb_w2v_train(emb_w2v *w, emb_w2v_progress_fn progress, void *user);

/* The vocabulary (row i of the vectors is word i). Owned by w. */
EMB_API const emb_vocab *emb_w2v_vocab(const emb_w2v *w);
/* A view of the input vectors, float32 [vocab size, dim], owned by w (with subwords, the
 * words' own rows, not yet averaged with their n-grams: emb_w2v_word_vectors). */
EMB_API emb_status emb_w2v_vectors(const emb_w2v *w, emb_tensor *view);
/* The tables as emb embeddings (owned by w): the input vectors and the output vectors. */
EMB_API emb_embedding *emb_w2v_input_embedding(const emb_w2v *w);
EMB_API emb_embedding *emb_w2v_output_embedding(const emb_w2v *w);
/* The vector of any word (dim floats into out): with subwords, the mean of its row (when
 * it is in the vocabulary) and its n-grams' rows, computed as fastText computes it; without,
 * its row. Errors: EMB_ERR_NULL, EMB_ERR_INVALID (no subwords and not in the vocabulary),
 * EMB_ERR_NOMEM. */
EMB_API emb_status emb_w2v_word_vector(const emb_w2v *w, const char *word, size_t len, float *out);
/* Every vocabulary word's vector (emb_w2v_word_vector) into a new float32 [vocab size, dim]
 * tensor the caller frees with emb_tensor_release: what fastText writes to its .vec.
 * Errors: EMB_ERR_NULL, EMB_ERR_NOMEM. */
EMB_API emb_status emb_w2v_word_vectors(const emb_w2v *w, emb_tensor *out);
/* Writes the model as fastText 0.9.2 writes a .bin (docs/file-formats.md), atomically: the
 * options as fastText's arguments, the vocabulary, the input rows (words, then the n-gram
 * buckets) and the output rows; `fasttext` loads it and gives the same word vectors.
 * Errors: EMB_ERR_NULL, EMB_ERR_INVALID (a value fastText cannot hold in its 32-bit
 * fields), EMB_ERR_IO, EMB_ERR_NOMEM. */
EMB_API emb_status emb_w2v_save_fasttext(const emb_w2v *w, const char *path);
/* The model as an emb_fasttext (include/emb/fasttext.h) the caller frees with
 * emb_fasttext_free: a copy of the vocabulary and both tables, the same as reading back what
 * emb_w2v_save_fasttext writes, without the file; it outlives w. Errors (*out untouched):
 * EMB_ERR_NULL, EMB_ERR_NOMEM. */
EMB_API emb_status emb_fasttext_from_w2v(const emb_w2v *w, emb_fasttext **out);
/* The same without copying the tables, for a trainer that is done: the model takes w's
 * tables (at the default bucket, 2,000,000 n-gram rows: 800 MB at dim 100, which the copy
 * would hold twice for a moment) and the rest of w is freed: on success w is gone, as after
 * emb_w2v_free. The model is the one emb_fasttext_from_w2v gives. Errors (w as it was,
 * *out untouched): EMB_ERR_NULL, EMB_ERR_NOMEM. */
EMB_API emb_status emb_fasttext_take_w2v(emb_w2v *w, emb_fasttext **out);
/* Tokens in the corpus (sentence ends excluded), and tokens done so far over all epochs. */
EMB_API int64_t emb_w2v_corpus_tokens(const emb_w2v *w);
/* Tokens of the corpus that a lenient run (options.lenient) skipped: not valid UTF-8
 * (*invalid) and longer than EMB_VOCAB_MAX_WORD bytes (*too_long); either may be NULL.
 * Both 0 for a run that is not lenient or a run from ids. */
EMB_API void emb_w2v_skipped(const emb_w2v *w, int64_t *invalid, int64_t *too_long);
EMB_API int64_t emb_w2v_words_done(const emb_w2v *w);
/* The options in force (defaults resolved). */
EMB_API emb_w2v_options emb_w2v_options_of(const emb_w2v *w);

/* Checkpoints: the whole training state (options, vocabulary, both tables, each thread's
 * position and random state, the corpus fingerprint), written atomically (a temporary file
 * in the same folder, flushed to disk, then renamed), so that a crash at any moment leaves
 * either the previous checkpoint or the new one. Layout: docs/word2vec.md.
 * With subwords (maxn > 0) the checkpoint also holds minn, maxn, bucket and the n-gram
 * bucket rows of the input table.
 * Errors: EMB_ERR_NULL, EMB_ERR_IO, EMB_ERR_STATE (the training diverged). */
EMB_API emb_status emb_w2v_save_checkpoint(const emb_w2v *w, const char *path);
/* Continues a run: reads the corpus again (it must give the same token ids: checked by
 * fingerprint) and restores the state. opts must equal the checkpoint's options except
 * `threads` and `lanes`: the run continues the checkpoint's lanes (each lane's share of the
 * corpus, position and random state are part of the state) whatever opts.lanes says, on the
 * threads opts asks for (at most one per lane), so a checkpoint moves to a machine with
 * another number of cores, and a 1-thread run (one lane) resumed there still ends with the
 * vectors of an uninterrupted run. emb_w2v_options_of tells the lanes and threads in
 * force.
 * Errors (*out untouched): as emb_w2v_create_from_file, EMB_ERR_IO (checkpoint
 * unreadable), EMB_ERR_FORMAT (not a checkpoint, corrupt or truncated, a different corpus
 * or options: the message says which field differs, and for another list of files which
 * file, by position, with the checkpoint's name, text size and fingerprint against this
 * run's; a field out of range or inconsistent with the others; tables holding NaN or
 * infinities). The checkpoint records the files read (names, text sizes and fingerprints);
 * a file renamed or compressed otherwise still resumes: the token ids decide. */
EMB_API emb_status emb_w2v_resume(const emb_w2v_options *opts, const char *corpus,
                                  const char *checkpoint, emb_w2v **out);
/* The same over the corpus paths[0..n) (emb_w2v_create_from_files). */
EMB_API emb_status emb_w2v_resume_files(const emb_w2v_options *opts, const char *const *paths,
                                        size_t n, const char *checkpoint, emb_w2v **out);

/* A run over a corpus whose vocabulary comes from `vocab` (copied) instead of from counting
 * the corpus: the word2vec tool's -read-vocab (emb_vocab_load reads its files). The words
 * are ordered by their counts in vocab and pruned by min_count and max_vocab; corpus tokens
 * that are not among them are dropped; subsampling uses vocab's counts (a word's frequency
 * is its count over the sum of the counts), as the word2vec tool does. corpus "-": stdin.
 * Errors (*out untouched): as emb_w2v_create_from_file, EMB_ERR_INVALID (a count < 1),
 * EMB_ERR_FORMAT (no word reaches min_count, or no corpus token is in the vocabulary). */
EMB_API emb_status emb_w2v_create_with_vocab(const emb_w2v_options *opts, const emb_vocab *vocab,
                                             const char *corpus, emb_w2v **out);
/* The same over the corpus paths[0..n) (emb_w2v_create_from_files). */
EMB_API emb_status emb_w2v_create_with_vocab_files(const emb_w2v_options *opts,
                                                   const emb_vocab *vocab, const char *const *paths,
                                                   size_t n, emb_w2v **out);

/* Continued training: a model saved by emb_w2v_save_checkpoint (at the end of a run, or
 * any checkpoint), or a fastText model (.bin, cbow or skipgram with negative sampling, as
 * fastText 0.9.2 or emb_w2v_save_fasttext writes it: its dictionary's words, "</s>" included,
 * with their counts, its input rows and n-gram buckets, its output rows), trained further on a
 * new corpus, as gensim's build_vocab(update=True)
 * followed by train() (docs/word2vec.md, "Continued training"). The vocabulary grows: a
 * word of the model keeps its row and its count grows by its count in the new corpus; a new
 * word seen at least min_count times gets a new row after the model's (by count, ties by
 * first appearance), its input vector drawn as a fresh run draws them (uniform in
 * [-0.5/dim, 0.5/dim) from the seed) and its output vector zero; rarer new words are
 * dropped. Both tables of the model are kept as they are. The model's dim is used (opts->dim
 * is ignored), and so are its subwords: a model trained with subwords (maxn > 0) continues
 * with its minn, maxn and bucket (opts' are ignored) and its n-gram bucket rows, which every
 * word's n-grams hash to as before, so a new word starts as the mean of its fresh row and
 * its n-grams' trained rows (gensim's FastText build_vocab(update=True) keeps the n-gram
 * vectors too); a model trained without subwords continues without them. The other options
 * are this run's. The learning rate decays from alpha to
 * min_alpha over epochs x the new corpus's tokens, as a fresh run's (and gensim's train()).
 * Subsampling uses the new corpus's counts; negative sampling the grown counts. The run
 * cannot be resumed from a checkpoint (emb_w2v_resume rebuilds the vocabulary from the
 * corpus alone). corpus "-": stdin.
 * Errors (*out untouched): as emb_w2v_create_from_file, EMB_ERR_IO (the model cannot be
 * read), EMB_ERR_FORMAT (not a model: the message names the file and the offset),
 * EMB_ERR_UNSUPPORTED (a supervised fastText model, one trained with another loss than
 * negative sampling, or a quantized .ftz). */
EMB_API emb_status emb_w2v_continue(const emb_w2v_options *opts, const char *model,
                                    const char *corpus, emb_w2v **out);
/* The same over the corpus paths[0..n) (emb_w2v_create_from_files). */
EMB_API emb_status emb_w2v_continue_files(const emb_w2v_options *opts, const char *model,
                                          const char *const *paths, size_t n, emb_w2v **out);

#ifdef __cplusplus
}
#endif

#endif /* EMB_WORD2VEC_H */
