/* src/w2v/w2v_internal.h: what the word2vec sources share: the run (struct emb_w2v, in
 * w2v_state.h) and their internal functions. */
#ifndef EMB_W2V_INTERNAL_H
#define EMB_W2V_INTERNAL_H

#include <emb/embedding.h>
#include <emb/random.h>
#include <emb/vocab.h>
#include <emb/word2vec.h>

#include "internal.h"
#include "kernels/sgns.h"
#include "w2v_state.h"

/* The folder of temporary files (TMPDIR, default /tmp), and a new read-write file there
 * without a name in the folder (-1 and errno on failure). */
const char *emb__w2v_tmp_dir(void);
int emb__w2v_tmp_fd(void);
/* An empty store written through a buffer (n = 0): the ids go to a temporary file in
 * TMPDIR once the buffer fills (an error naming the folder when it cannot be made), and stay
 * in memory (mem) for a corpus that never fills it. */
emb_status emb__w2v_ids_open_file(emb__w2v_ids *s, const char *name);
/* A store of the n ids in memory (taken over). */
void emb__w2v_ids_use_memory(emb__w2v_ids *s, int32_t *ids, int64_t n);
void emb__w2v_ids_close(emb__w2v_ids *s);
/* Appends an id to a store being written (buffered). */
emb_status emb__w2v_ids_push(emb__w2v_ids *s, int32_t id);
/* Ends the writing: the store is complete and can be read (nothing is pushed after). */
emb_status emb__w2v_ids_flush(emb__w2v_ids *s);
/* Renumbers a complete store in place: id -> map[id], ids that map to -1 (or less) removed,
 * no -1 at the start and no two -1 in a row. */
emb_status emb__w2v_ids_map(emb__w2v_ids *s, const int32_t *map);

/* Reads a complete store (nothing pushed after the cursor is made) through one bounded
 * buffer: buf[0, len) holds ids [lo, lo + len). */
typedef struct emb__w2v_cursor {
    const emb__w2v_ids *s;
    const int32_t *buf;
    int32_t *own;
    int64_t lo, len;
} emb__w2v_cursor;

emb_status emb__w2v_cursor_init(emb__w2v_cursor *c, const emb__w2v_ids *s);
void emb__w2v_cursor_free(emb__w2v_cursor *c);
/* Loads the ids from pos on into the buffer; false on a read error. */
bool emb__w2v_cursor_fill(emb__w2v_cursor *c, int64_t pos);

/* The id at pos (in [0, n)), or INT32_MIN when it cannot be read. */
static inline int32_t emb__w2v_id_at(emb__w2v_cursor *c, int64_t pos) {
    if ((uint64_t)(pos - c->lo) >= (uint64_t)c->len && !emb__w2v_cursor_fill(c, pos))
        return INT32_MIN;
    return c->buf[pos - c->lo];
}

/* The expected share of a token of word id that subsampling keeps (its keep probability):
 * what a lane's work is measured in (the lanes' cut, emb__w2v_split_lanes, and their rounds). */
static inline double emb__w2v_keep_weight(const emb_w2v *w, int32_t id) {
    return w->weight[id];
}

/* The most lanes a run may have (emb_w2v_options.lanes), and the lanes per thread of a run
 * with more than one thread that does not say (dynamic sharing: a thread that runs slower,
 * on a virtual CPU that gets less of its core, takes fewer of a round's lanes). */
#define EMB__W2V_LANES_MAX        4096
#define EMB__W2V_LANES_PER_THREAD 4

/* Cuts the ids into w->nt lanes of equal expected work (the summed keep probabilities of
 * their tokens), each boundary where one thread starts a sentence; resets the lanes'
 * positions, epochs and random states and sets w->keep_mean (src/w2v/create.c). */
emb_status emb__w2v_split_lanes(emb_w2v *w);
/* Whether lanes[0..w->nt) are a cut emb__w2v_split_lanes may make of these ids (contiguous,
 * covering them, boundaries at sentence starts): *ok. Errors: the ids cannot be read. */
emb_status emb__w2v_lanes_valid(const emb_w2v *w, const emb__w2v_lane *lanes, bool *ok);

/* Fills w->alias (V entries, allocated by the caller) with Walker's alias table for
 * P(w) proportional to count^0.75 (src/w2v/sampling.c). Errors: EMB_ERR_NOMEM. */
emb_status emb__w2v_build_alias(emb_w2v *w);

/* Phrases (src/w2v/phrased.c): the options' check, and a run over the phrased text of the
 * corpus paths[0..n) (opts->phrases > 0; stdin is copied to a temporary file to be read
 * once per pass). */
emb_status emb__w2v_phrases_check(const emb_w2v_options *o);
emb_status emb__w2v_create_phrased(const emb_w2v_options *opts, const char *const *paths, size_t n,
                                   emb_w2v **out);
/* EMB_ERR_INVALID naming `what` when o->phrases > 0 (the entry points that do not read the
 * corpus through the phrases). */
emb_status emb__w2v_no_phrases(const emb_w2v_options *o, const char *what);
/* emb_w2v_create_from_stream without the refusal of phrases (src/w2v/trainer.c). */
emb_status emb__w2v_create_stream(const emb_w2v_options *opts, FILE *f, const char *name,
                                  emb_w2v **out);

/* Subwords (src/w2v/subword.c): the options' check, and the rows of every word. */
emb_status emb__w2v_subword_check(const emb_w2v_options *o);
emb_status emb__w2v_subword_setup(emb_w2v *w);

/* The first row of the input (*table 0) or else the output (*table 1) vectors that holds
 * NaN or an infinity: true with *table and *row set; false when every value is finite. */
bool emb__w2v_find_nonfinite(const emb_w2v *w, int *table, int64_t *row);

/* The rows of each table (the first of the vocabulary) each thread of a multi-threaded run
 * keeps its own copy of; the others are updated in place. Of the copied rows, the first
 * emb__w2v_hot_rows of the output table and emb__w2v_hot_in_rows of the input table (CBOW and
 * skip-gram without subwords, one process) are merged after every round, the others less often
 * (src/w2v/trainer.c). Test hooks: tests lower them to reach every kind of row with a small
 * vocabulary. */
extern int64_t emb__w2v_copy_rows;
extern int64_t emb__w2v_hot_rows;
extern int64_t emb__w2v_hot_in_rows;

/* The loss terms of one step (see emb__sgns_step_fn for its arguments) from the rows as they
 * are before it: the sum over inputs and trained targets of -log sigmoid(+-score)
 * (src/w2v/loss.c). h: dim floats of scratch (CBOW). */
double emb__w2v_step_loss(const emb__sgns_rows *in, const emb__sgns_rows *out, int64_t dim,
                          const int32_t *ctx, int m, const int32_t *tgt, int n, bool cbow,
                          bool cbow_mean, float *h);

/* A checkpoint (or --save-state file) read as a model: its dim, its subword options (sub:
 * minn, maxn, bucket; maxn 0 without subwords), words with counts, and both tables (malloc'd:
 * the input table's V rows and then, with subwords, its `bucket` n-gram rows; the output
 * table's V rows). Sizes checked before allocating (src/w2v/checkpoint.c). */
emb_status emb__w2v_read_model(const unsigned char *data, size_t n, const char *path, int64_t *dim,
                               int64_t sub[3], emb_vocab **vocab, float **syn0, float **syn1);

/* Word i's subsampling threshold for a word seen `count` times in `total` tokens. */
void emb__w2v_set_keep(emb_w2v *w, int64_t i, double count, double total);

/* Builds everything from a vocabulary and final ids (both taken over; src/w2v/trainer.c). */
emb_status emb__w2v_setup(const emb_w2v_options *o, emb_vocab *vocab, emb__w2v_ids *ids,
                          emb_w2v **out);

/* The text of a corpus, file after file (src/w2v/corpus_stream.c): paths are files,
 * directories (their regular files, recursively, hidden names skipped, in byte order of the
 * path names) and "-" (stdin, at most once); each file is plain or gzip, bzip2, xz or zstd
 * data, recognised by its first bytes. */
typedef struct emb__corpus_src emb__corpus_src;
/* Lists the files (errors: a path that does not exist, a directory without files, "-" twice). */
emb_status emb__corpus_open_paths(emb__corpus_src **out, const char *const *paths, size_t n);
/* One open stream (not closed), named name in messages. */
emb_status emb__corpus_open_stream(emb__corpus_src **out, FILE *f, const char *name);
void emb__corpus_close(emb__corpus_src *s);
/* Opens the next file: *have false when there is none. */
emb_status emb__corpus_next_file(emb__corpus_src *s, bool *have);
/* Up to cap bytes of the current file's text; *got 0 at its end. A corrupt or truncated
 * compressed file is EMB_ERR_FORMAT naming the file and the byte offset in it. */
emb_status emb__corpus_read(emb__corpus_src *s, char *buf, size_t cap, size_t *got);
/* The current file's name ("<stdin>" for "-"). */
const char *emb__corpus_name(const emb__corpus_src *s);
/* The current file, just opened, when it is plain text in a regular file (not standard
 * input, not an open stream, not compressed): true with its descriptor (for pread, which
 * leaves the stream's reads alone) and its size in bytes (> 0). */
bool emb__corpus_plain_file(const emb__corpus_src *s, int *fd, uint64_t *size);
/* Makes the corpus readable more than once: standard input, when among the paths, is copied
 * (as it comes, compressed or not) into a temporary file in TMPDIR of at most
 * EMB__CORPUS_SPOOL_MAX bytes, which "-" then reads. Errors: EMB_ERR_IO (reading stdin,
 * writing the copy: the message names the folder), EMB_ERR_UNSUPPORTED (stdin longer than
 * the bound). */
#define EMB__CORPUS_SPOOL_MAX ((uint64_t)64 << 30)
emb_status emb__corpus_spool_stdin(emb__corpus_src *s);
/* The same with the bound given (the tests' way to reach it). */
emb_status emb__corpus_spool_stdin_max(emb__corpus_src *s, uint64_t max);
/* Starts again at the first file. Errors: EMB_ERR_INVALID (an open stream, or stdin that was
 * not spooled: it cannot be read twice). */
emb_status emb__corpus_rewind(emb__corpus_src *s);
/* The corpus's text as one stream, as the training reader sees it: the files one after the
 * other, a UTF-8 byte-order mark at the start of each dropped, and a line end after a file
 * whose text does not end with one. Closing it does not close s (which must outlive it).
 * A failure of s is a read error of the stream (ferror); emb__corpus_failed then raises
 * s's own message (the file and the offset) again and returns its status (EMB_OK when
 * nothing failed). NULL when out of memory. */
FILE *emb__corpus_text(emb__corpus_src *s);
emb_status emb__corpus_failed(const emb__corpus_src *s);
/* The files read since the corpus was opened or rewound, their text's bytes and fingerprint
 * (w2v_state.h), moved to *out (which the caller frees with emb__corpus_files_free). */
void emb__corpus_take_files(emb__corpus_src *s, emb__corpus_files *out);
void emb__corpus_files_free(emb__corpus_files *f);
/* "first" or "first and N more": the corpus paths[0..n) named in messages. */
void emb__corpus_label(const char *const *paths, size_t n, char *buf, size_t size);

/* Reads and tokenises a corpus (a UTF-8 byte-order mark at the start of each file is
 * dropped; the end of a file ends a sentence), builds the sorted, pruned vocabulary and the
 * final ids (dropped words removed, -1 at line ends, no two -1 in a row) in a file store.
 * name names the whole corpus in messages. skipped: the tokens a lenient read skipped, not
 * UTF-8 and too long. */
emb_status emb__w2v_read_corpus(const emb_w2v_options *o, emb__corpus_src *src, const char *name,
                                emb_vocab **vocab, emb__w2v_ids *ids, int64_t skipped[2]);
/* With threads > 1 (or 0 and more than one thread), a plain file of at least twice this
 * many bytes is read by up to `threads` threads, each a range of at least this many bytes,
 * with the result of reading it alone (src/w2v/corpus.c). 1 MiB; tests lower it. */
extern size_t emb__w2v_range_min;
/* Called, when not NULL, with a file's name after its ranges were read and before its
 * fingerprint is taken (tests change the file there; NULL in use). */
extern void (*emb__w2v_ranges_read)(const char *name);
/* The same over paths (emb__corpus_open_paths); the files read into *files (may be NULL). */
emb_status emb__w2v_read_paths(const emb_w2v_options *o, const char *const *paths, size_t n,
                               emb_vocab **vocab, emb__w2v_ids *ids, int64_t skipped[2],
                               emb__corpus_files *files);

#endif /* EMB_W2V_INTERNAL_H */
