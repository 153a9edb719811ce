/* py_train.c: the losses, the default generator and word2vec training; emb._emb.Optimizer is
 * in py_optim.c. */
#include "pyemb.h"

#include <math.h>
#include <string.h>

/* ---------------------------------------------------------------------------------------
 * Losses: one entry point per direction, the loss named by `kind`
 * ------------------------------------------------------------------------------------- */

enum { L_CE, L_NLL, L_MSE, L_BCE };

static int loss_kind(const char *s) {
    if (!strcmp(s, "cross_entropy")) return L_CE;
    if (!strcmp(s, "nll_loss")) return L_NLL;
    if (!strcmp(s, "mse_loss")) return L_MSE;
    if (!strcmp(s, "binary_cross_entropy_with_logits")) return L_BCE;
    PyErr_Format(PyExc_ValueError, "unknown loss '%s'", s);
    return -1;
}

static int reduction(const char *s, emb_reduction *out) {
    if (!strcmp(s, "mean"))
        *out = EMB_REDUCTION_MEAN;
    else if (!strcmp(s, "sum"))
        *out = EMB_REDUCTION_SUM;
    else if (!strcmp(s, "none"))
        *out = EMB_REDUCTION_NONE;
    else {
        PyErr_Format(PyExc_ValueError, "%s is not a valid value for reduction", s);
        return -1;
    }
    return 0;
}

/* loss(kind, input, target, weight=None, pos_weight=None, ignore_index=-100,
 *      reduction='mean', label_smoothing=0.0, grad_loss=None)
 * Without grad_loss: the loss. With grad_loss: the gradient of the input. */
static PyObject *m_loss(PyObject *m, PyObject *args, PyObject *kw) {
    static char *names[] = {
        "kind",         "input",     "target",          "weight",    "pos_weight",
        "ignore_index", "reduction", "label_smoothing", "grad_loss", NULL};
    const char *kname, *red = "mean";
    PyObject *input, *target, *weight = Py_None, *posw = Py_None, *gl = Py_None;
    long long ignore = -100;
    double ls = 0.0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "sOO|OOLsdO:loss", names, &kname, &input, &target,
                                     &weight, &posw, &ignore, &red, &ls, &gl))
        return NULL;
    int k = loss_kind(kname);
    if (k < 0) return NULL;
    emb_loss_options o = emb_loss_options_default();
    if (reduction(red, &o.reduction) < 0) return NULL;
    o.ignore_index = ignore;
    o.label_smoothing = ls;
    int classes = (k == L_CE || k == L_NLL);
    py_arg in = {0}, tg = {0}, wa = {0}, pw = {0}, ga = {0};
    PyObject *res = NULL;
    if (py_arg_get(input, "input", PY_DT_F32, 0, &in) < 0 ||
        py_arg_get(target, "target", classes ? PY_DT(EMB_INT64) : PY_DT_F32, 0, &tg) < 0 ||
        py_arg_get(weight, "weight", PY_DT_F32, PY_ARG_OPTIONAL, &wa) < 0 ||
        py_arg_get(posw, "pos_weight", PY_DT_F32, PY_ARG_OPTIONAL, &pw) < 0 ||
        py_arg_get(gl, "grad_loss", PY_DT_F32, PY_ARG_OPTIONAL, &ga) < 0)
        goto done;
    if (wa.present) o.weight = &wa.t;
    if (pw.present && k != L_BCE) {
        PyErr_SetString(PyExc_TypeError, "pos_weight is an argument of "
                                         "binary_cross_entropy_with_logits only");
        goto done;
    }
    emb_tensor out;
    emb_status st;
    if (ga.present) {
        res = py_new_array(EMB_FLOAT32, in.t.ndim, in.t.shape, &out);
        if (!res) goto done;
        Py_BEGIN_ALLOW_THREADS switch (k) {
        case L_CE:
            st = emb_cross_entropy_backward(&in.t, &tg.t, &o, &ga.t, &out);
            break;
        case L_NLL:
            st = emb_nll_loss_backward(&in.t, &tg.t, &o, &ga.t, &out);
            break;
        case L_MSE:
            st = emb_mse_loss_backward(&in.t, &tg.t, &o, &ga.t, &out);
            break;
        default:
            st = emb_bce_with_logits_backward(&in.t, &tg.t, pw.present ? &pw.t : NULL, &o, &ga.t,
                                              &out);
        }
        Py_END_ALLOW_THREADS
    } else {
        const emb_tensor *like = classes ? &tg.t : &in.t; /* the unreduced loss's shape */
        int nd = o.reduction == EMB_REDUCTION_NONE ? like->ndim : 0;
        res = py_new_array(EMB_FLOAT32, nd, like->shape, &out);
        if (!res) goto done;
        Py_BEGIN_ALLOW_THREADS switch (k) {
        case L_CE:
            st = emb_cross_entropy_forward(&in.t, &tg.t, &o, &out);
            break;
        case L_NLL:
            st = emb_nll_loss_forward(&in.t, &tg.t, &o, &out);
            break;
        case L_MSE:
            st = emb_mse_loss_forward(&in.t, &tg.t, &o, &out);
            break;
        default:
            st = emb_bce_with_logits_forward(&in.t, &tg.t, pw.present ? &pw.t : NULL, &o, &out);
        }
        Py_END_ALLOW_THREADS
    }
    if (st != EMB_OK) {
        Py_CLEAR(res);
        py_raise(st);
    }
done:
    py_arg_release(&ga);
    py_arg_release(&pw);
    py_arg_release(&wa);
    py_arg_release(&tg);
    py_arg_release(&in);
    return res;
}

/* log_softmax(x) / log_softmax(y, grad_y=...) for the backward */
static PyObject *m_log_softmax(PyObject *m, PyObject *args, PyObject *kw) {
    static char *names[] = {"x", "grad_y", NULL};
    PyObject *x, *gy = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|O:log_softmax", names, &x, &gy)) return NULL;
    py_arg xa = {0}, ga = {0};
    PyObject *res = NULL;
    if (py_arg_get(x, "x", PY_DT_F32, 0, &xa) < 0 ||
        py_arg_get(gy, "grad_y", PY_DT_F32, PY_ARG_OPTIONAL, &ga) < 0)
        goto done;
    emb_tensor out;
    res = py_new_array(EMB_FLOAT32, xa.t.ndim, xa.t.shape, &out);
    if (!res) goto done;
    emb_status st;
    if (ga.present)
        PY_NOGIL(st, emb_log_softmax_backward(&xa.t, &ga.t, &out));
    else
        PY_NOGIL(st, emb_log_softmax_forward(&xa.t, &out));
    if (st != EMB_OK) {
        Py_CLEAR(res);
        py_raise(st);
    }
done:
    py_arg_release(&ga);
    py_arg_release(&xa);
    return res;
}

/* ---------------------------------------------------------------------------------------
 * The default generator
 * ------------------------------------------------------------------------------------- */

static PyObject *m_manual_seed(PyObject *m, PyObject *arg) {
    /* torch.manual_seed: a negative seed s means (uint64)s */
    PyObject *mask = PyLong_FromUnsignedLongLong(UINT64_MAX);
    if (!mask) return NULL;
    PyObject *v = PyNumber_And(arg, mask);
    Py_DECREF(mask);
    if (!v) return NULL;
    unsigned long long s = PyLong_AsUnsignedLongLong(v);
    Py_DECREF(v);
    if (s == (unsigned long long)-1 && PyErr_Occurred()) return NULL;
    Py_BEGIN_ALLOW_THREADS PyThread_acquire_lock(py_generator_lock.lock, WAIT_LOCK);
    emb_manual_seed(s);
    PyThread_release_lock(py_generator_lock.lock);
    Py_END_ALLOW_THREADS Py_RETURN_NONE;
}

static PyObject *m_initial_seed(PyObject *m, PyObject *unused) {
    uint64_t s;
    Py_BEGIN_ALLOW_THREADS PyThread_acquire_lock(py_generator_lock.lock, WAIT_LOCK);
    s = emb_generator_initial_seed(NULL);
    PyThread_release_lock(py_generator_lock.lock);
    Py_END_ALLOW_THREADS return PyLong_FromUnsignedLongLong(s);
}

static PyObject *m_random_fill(PyObject *m, PyObject *args, PyObject *kw) {
    static char *names[] = {"out", "kind", "a", "b", NULL};
    PyObject *out;
    const char *kind;
    double a = 0, b = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "Os|dd:random_fill", names, &out, &kind, &a, &b))
        return NULL;
    int normal = !strcmp(kind, "normal"), uniform = !strcmp(kind, "uniform");
    if (!normal && !uniform) {
        PyErr_SetString(PyExc_ValueError, "kind must be 'normal' or 'uniform'");
        return NULL;
    }
    py_arg o;
    if (py_arg_get(out, "out", PY_DT_F32 | PY_DT(EMB_FLOAT64), PY_ARG_WRITE, &o) < 0) return NULL;
    emb_status st;
    PY_CALL(&py_generator_lock, st,
            normal ? emb_normal_(&o.t, a, b, NULL) : emb_uniform_(&o.t, a, b, NULL));
    py_arg_release(&o);
    if (st != EMB_OK) return py_raise(st);
    Py_RETURN_NONE;
}

/* ---------------------------------------------------------------------------------------
 * word2vec training
 * ------------------------------------------------------------------------------------- */

typedef struct w2v_cb {
    PyObject *progress; /* callable or NULL */
    int stopped_by_user;
} w2v_cb;

static int w2v_progress(const emb_w2v_progress *p, void *user) {
    w2v_cb *cb = user;
    PyGILState_STATE g = PyGILState_Ensure();
    int stop = 0;
    if (PyErr_CheckSignals() < 0)
        stop = 1; /* Ctrl-C: KeyboardInterrupt is pending */
    else if (cb->progress) {
        PyObject *r = PyObject_CallFunction(cb->progress, "{s:L,s:L,s:i,s:d,s:d}", "words_done",
                                            (long long)p->words_done, "words_total",
                                            (long long)p->words_total, "epoch", p->epoch, "alpha",
                                            p->alpha, "seconds", p->seconds);
        if (!r)
            stop = 1;
        else {
            int t = PyObject_IsTrue(r);
            Py_DECREF(r);
            if (t < 0)
                stop = 1;
            else if (t)
                stop = cb->stopped_by_user = 1;
        }
    }
    PyGILState_Release(g);
    return stop;
}

/* The corpus paths: one path, or a list or tuple of them (each a str, bytes or os.PathLike),
 * as file-system bytes in *held (a new list) and their pointers in *out (PyMem). */
static int corpus_paths(PyObject *corpus, PyObject **held, const char ***out, size_t *n) {
    PyObject *seq = PyList_Check(corpus) || PyTuple_Check(corpus)
                        ? PySequence_Fast(corpus, "corpus")
                        : PyTuple_Pack(1, corpus);
    if (!seq) return -1;
    Py_ssize_t k = PySequence_Fast_GET_SIZE(seq);
    *held = PyList_New(0);
    *out = PyMem_Calloc((size_t)k + 1, sizeof **out);
    int rc = *held && *out ? 0 : -1;
    if (rc == 0 && k == 0) {
        PyErr_SetString(PyExc_ValueError, "the corpus is an empty list of paths");
        rc = -1;
    }
    for (Py_ssize_t i = 0; rc == 0 && i < k; i++) {
        PyObject *b;
        if (py_path(PySequence_Fast_GET_ITEM(seq, i), &b) < 0 || PyList_Append(*held, b) < 0)
            rc = -1;
        if (b) (*out)[i] = PyBytes_AS_STRING(b);
        Py_XDECREF(b);
    }
    Py_DECREF(seq);
    if (rc < 0 && !PyErr_Occurred()) PyErr_NoMemory();
    *n = (size_t)k;
    return rc;
}

/* The phrases options: passes, min_count, threshold, delimiter and scoring by name. */
static int phrases_options(emb_w2v_options *o, int passes, long long min_count, double threshold,
                           const char *delimiter, const char *scoring) {
    o->phrases = passes;
    o->phrases_min_count = min_count;
    o->phrases_threshold = threshold;
    if (strlen(delimiter) >= sizeof o->phrases_delimiter) {
        PyErr_SetString(PyExc_ValueError, "phrases_delimiter must have 1 to 16 bytes");
        return -1;
    }
    strcpy(o->phrases_delimiter, delimiter);
    if (strcmp(scoring, "default") != 0 && strcmp(scoring, "npmi") != 0) {
        PyErr_Format(PyExc_ValueError, "phrases_scoring is 'default' or 'npmi', not '%s'", scoring);
        return -1;
    }
    o->phrases_scoring = strcmp(scoring, "npmi") == 0 ? EMB_PHRASES_NPMI : EMB_PHRASES_DEFAULT;
    return 0;
}

/* The result of train_word2vec for a run that ended with st. A subword model takes the
 * trainer's tables (emb_fasttext_take_w2v): *wp is then NULL. */
static PyObject *trained(emb_w2v **wp, emb_status st, const w2v_cb *cb) {
    const emb_w2v *w = *wp;
    PyObject *res = NULL, *words = NULL, *counts = NULL, *vec = NULL, *model = NULL,
             *skipped = NULL;
    if (st != EMB_OK && !(st == EMB_ERR_CANCELLED && cb->stopped_by_user && !PyErr_Occurred()))
        return py_raise(st);
    PyObject *wc = py_vocab_lists(emb_w2v_vocab(w));
    if (!wc) return NULL;
    words = Py_NewRef(PyTuple_GET_ITEM(wc, 0));
    counts = Py_NewRef(PyTuple_GET_ITEM(wc, 1));
    Py_DECREF(wc);
    emb_tensor src, dst;
    emb_status vst = emb_w2v_vectors(w, &src);
    if (vst != EMB_OK) {
        py_raise(vst);
        goto done;
    }
    vec = py_new_array(EMB_FLOAT32, 2, src.shape, &dst);
    if (!vec) goto done;
    memcpy(dst.data, src.data, emb_tensor_nbytes(&src));
    int64_t invalid = 0, too_long = 0; /* read before a subword model takes the trainer */
    emb_w2v_skipped(w, &invalid, &too_long);
    if (!(skipped = Py_BuildValue("(LL)", (long long)invalid, (long long)too_long))) goto done;
    if (emb_w2v_options_of(w).maxn > 0) { /* the model, for the vectors of words seen or not */
        emb_fasttext *ft = NULL;
        PY_NOGIL(vst, emb_fasttext_take_w2v(*wp, &ft)); /* no second copy of the tables */
        if (vst != EMB_OK) {
            py_raise(vst);
            goto done;
        }
        *wp = NULL;
        if (!(model = py_fasttext_from(ft))) goto done;
    } else {
        model = Py_NewRef(Py_None);
    }
    res = Py_BuildValue("OOOOOO", words, counts, vec,
                        st == EMB_OK && !cb->stopped_by_user ? Py_True : Py_False, skipped, model);
done:
    Py_XDECREF(skipped);
    Py_XDECREF(model);
    Py_XDECREF(words);
    Py_XDECREF(counts);
    Py_XDECREF(vec);
    return res;
}

/* train_word2vec(corpus_paths, model='skipgram', progress=None, **options) ->
 *   (words: list[str], counts: list[int], vectors: float32 [V, dim] (the words' own rows),
 *    finished: bool, skipped: (invalid, too_long), model: a FastText with max_n > 0, else
 *    None) */
static PyObject *m_train_word2vec(PyObject *m, PyObject *args, PyObject *kw) {
    static char *names[] = {"corpus",
                            "sg",
                            "vector_size",
                            "window",
                            "negative",
                            "sample",
                            "min_count",
                            "max_vocab",
                            "epochs",
                            "alpha",
                            "min_alpha",
                            "cbow_mean",
                            "workers",
                            "seed",
                            "lowercase",
                            "strip_punct",
                            "max_sentence",
                            "shared_negatives",
                            "progress",
                            "lenient",
                            "phrases",
                            "phrases_min_count",
                            "phrases_threshold",
                            "phrases_delimiter",
                            "phrases_scoring",
                            "lanes",
                            "min_n",
                            "max_n",
                            "bucket",
                            "continue_from",
                            "save_state",
                            NULL};
    PyObject *corpus, *progress = Py_None, *alpha = Py_None, *min_alpha = Py_None, *from = NULL,
                      *state = NULL, *res = NULL;
    int sg = 1;
    emb_w2v_options o = emb_w2v_options_default(EMB_W2V_SKIPGRAM);
    long long dim = o.dim, min_count = o.min_count, max_vocab = o.max_vocab,
              seed = (long long)o.seed, max_sentence = o.max_sentence,
              ph_min_count = o.phrases_min_count;
    int window = o.window, negative = o.negative, epochs = o.epochs, cbow_mean = o.cbow_mean,
        threads = o.threads, lower = o.lowercase, strip = o.strip_punct,
        shared = o.shared_negatives, lenient = o.lenient, phrases = o.phrases, lanes = o.lanes,
        minn = o.minn, maxn = o.maxn;
    long long bucket = o.bucket;
    double sample = o.sample, ph_threshold = o.phrases_threshold;
    const char *ph_delimiter = "_", *ph_scoring = "default";
    if (!PyArg_ParseTupleAndKeywords(
            args, kw, "O|pLiidLLiOOpiLppLpOpiLdssiiiLO&O&:train_word2vec", names, &corpus, &sg,
            &dim, &window, &negative, &sample, &min_count, &max_vocab, &epochs, &alpha, &min_alpha,
            &cbow_mean, &threads, &seed, &lower, &strip, &max_sentence, &shared, &progress,
            &lenient, &phrases, &ph_min_count, &ph_threshold, &ph_delimiter, &ph_scoring, &lanes,
            &minn, &maxn, &bucket, PyUnicode_FSConverter, &from, PyUnicode_FSConverter, &state))
        goto out;
    if (progress != Py_None && !PyCallable_Check(progress)) {
        PyErr_SetString(PyExc_TypeError, "progress must be callable or None");
        goto out;
    }
    o = emb_w2v_options_default(sg ? EMB_W2V_SKIPGRAM : EMB_W2V_CBOW);
    o.dim = dim;
    o.window = window;
    o.negative = negative;
    o.sample = sample;
    o.min_count = min_count;
    o.max_vocab = max_vocab;
    o.epochs = epochs;
    const bool bad_alpha = py_opt_double(alpha, &o.alpha) < 0;
    o.min_alpha = o.alpha * 1e-4;
    if (bad_alpha || py_opt_double(min_alpha, &o.min_alpha) < 0) goto out;
    o.cbow_mean = cbow_mean;
    o.threads = threads;
    o.lanes = lanes;
    o.seed = (uint64_t)seed;
    o.lowercase = lower;
    o.strip_punct = strip;
    o.max_sentence = max_sentence;
    o.shared_negatives = shared;
    o.lenient = lenient;
    o.minn = minn;
    o.maxn = maxn;
    o.bucket = bucket;
    if (phrases_options(&o, phrases, ph_min_count, ph_threshold, ph_delimiter, ph_scoring) < 0)
        goto out;
    PyObject *held = NULL;
    const char **paths = NULL;
    size_t npaths = 0;
    emb_w2v *w = NULL;
    emb_status st = EMB_OK;
    const char *model = from ? PyBytes_AS_STRING(from) : NULL;
    if (corpus_paths(corpus, &held, &paths, &npaths) == 0)
        PY_NOGIL(st, model ? emb_w2v_continue_files(&o, model, paths, npaths, &w)
                           : emb_w2v_create_from_files(&o, paths, npaths, &w));
    PyMem_Free(paths);
    Py_XDECREF(held);
    if (PyErr_Occurred()) goto out;
    if (st != EMB_OK) {
        py_raise(st);
        goto out;
    }
    w2v_cb cb = {progress == Py_None ? NULL : progress, 0};
    PY_NOGIL(st, emb_w2v_train(w, w2v_progress, &cb));
    /* the whole state, for continue_from (`emb train --save-state`), of a run that was
     * not interrupted by an error or Ctrl-C */
    emb_status sst = EMB_OK;
    if (state &&
        (st == EMB_OK || (st == EMB_ERR_CANCELLED && cb.stopped_by_user && !PyErr_Occurred())))
        PY_NOGIL(sst, emb_w2v_save_checkpoint(w, PyBytes_AS_STRING(state)));
    res = sst != EMB_OK ? py_raise(sst) : trained(&w, st, &cb);
    emb_w2v_free(w);
out:
    Py_XDECREF(from);
    Py_XDECREF(state);
    return res;
}

PyMethodDef py_train_functions[] = {
    {"loss", (PyCFunction)(void (*)(void))m_loss, METH_VARARGS | METH_KEYWORDS,
     "loss(kind, input, target, weight=None, pos_weight=None, ignore_index=-100, "
     "reduction='mean', label_smoothing=0.0, grad_loss=None): kind is 'cross_entropy', "
     "'nll_loss', 'mse_loss' or 'binary_cross_entropy_with_logits'; with grad_loss, the "
     "gradient of the input"},
    {"log_softmax", (PyCFunction)(void (*)(void))m_log_softmax, METH_VARARGS | METH_KEYWORDS,
     "log_softmax(x) over the last dimension; log_softmax(y, grad_y=g): the backward"},
    {"manual_seed", (PyCFunction)m_manual_seed, METH_O,
     "manual_seed(seed): torch.manual_seed on emb's default generator"},
    {"initial_seed", (PyCFunction)m_initial_seed, METH_NOARGS, "initial_seed() -> int"},
    {"random_fill", (PyCFunction)(void (*)(void))m_random_fill, METH_VARARGS | METH_KEYWORDS,
     "random_fill(out, 'normal'|'uniform', a, b): Tensor.normal_(a, b) / uniform_(a, b) from "
     "the default generator, in place"},
    {"train_word2vec", (PyCFunction)(void (*)(void))m_train_word2vec, METH_VARARGS | METH_KEYWORDS,
     "train_word2vec(corpus_paths, ...) -> (words, counts, vectors, finished, (invalid, "
     "too_long), FastText model or None)"},
    {NULL}};

int py_train_init(PyObject *m) {
    if (PyType_Ready(&py_optimizer_type) < 0) return -1;
    return PyModule_AddObjectRef(m, "Optimizer", (PyObject *)&py_optimizer_type);
}
