#!/usr/bin/env python3
"""The training step of a small model with torch's nn.Embedding / nn.EmbeddingBag against the
same model with emb.torch's drop-ins, in one run: forward, backward and a torch optimizer
step, dense and sparse; and a third time with emb.torch's modules and
emb.torch.apply_optimizer_in_backward (TorchRec's call: the same torch optimizer, applied by
emb inside the backward, fused with the embeddings' sparse backward). The models are built
from the same seed; the script checks that their parameters are still equal after the timed
steps (both promise torch's bits).

Each configuration is timed in `rounds` alternating rounds (torch, then emb) of `steps`
steps after warm-up steps; the best round's mean step time counts. Ratios are torch time /
emb time: above 1 means the emb model steps faster.

--cpu times the process's CPU time (time.process_time) instead of the wall clock: on a
loaded machine, with --threads 1, it leaves out the time the process waits for a core.
The column fwd+bwd is the ratio of the forward and backward alone (zero_grad, the model,
the loss and its backward: everything but the optimizer's step, which is torch's own code in
both models), each model's best round of that part (a round whose optimizer steps were slow
is not the best round of the whole step, yet its forward and backward can be).

The page faults per step (minor faults of the process during the best round's model; the
machine's load does not change them) show how much of a step is the kernel mapping fresh
memory for new tensors.

Usage (the package from a build folder):
  PYTHONPATH=build/python /usr/bin/python3 bench/python_step.py [--threads 2] [--steps 20]
      [--rounds 3] [--quick] [--cpu] [--model "sparse sgd" ...]
"""
import argparse
import resource
import time

import torch
from torch import nn

import emb
import emb.torch as et

CONFIGS = [
    # name, rows, dim, batch, positions per sample, bag mode, sparse, optimizer
    ("dense adam", 100000, 64, 256, 20, "sum", False, "adam"),
    ("sparse sgd", 1000000, 64, 1024, 20, "mean", True, "sgd"),
    ("sparse adagrad", 1000000, 64, 1024, 20, "sum", True, "adagrad"),
    ("bag max", 100000, 64, 512, 50, "max", False, "sgd"),
]
QUICK = [(n, r // 10, d, b // 4, p, m, s, o) for n, r, d, b, p, m, s, o in CONFIGS]


class Model(nn.Module):
    def __init__(self, emb_cls, bag_cls, rows, dim, mode, sparse):
        super().__init__()
        self.e = emb_cls(rows, dim, sparse=sparse)
        self.b = bag_cls(rows, dim, mode=mode, sparse=sparse and mode != "max")
        self.l = nn.Linear(2 * dim, 10)

    def forward(self, x, y):
        return self.l(torch.cat([self.e(x).mean(1), self.b(y)], 1))


OPTIMIZERS = {"adam": (torch.optim.Adam, {"lr": 1e-3}), "sgd": (torch.optim.SGD, {"lr": 0.1}),
              "adagrad": (torch.optim.Adagrad, {"lr": 0.1})}


def make(cls_pair, cfg, in_backward=False):
    """The model and its optimizers; in_backward: emb.torch.apply_optimizer_in_backward on
    every parameter instead (no optimizer to step after the backward)."""
    _, rows, dim, _, _, mode, sparse, optname = cfg
    torch.manual_seed(0)
    m = Model(*cls_pair, rows, dim, mode, sparse)
    cls, kw = OPTIMIZERS[optname]
    if in_backward:
        et.apply_optimizer_in_backward(cls, m.parameters(), kw)
        return m, []
    return m, [cls(m.parameters(), **kw)]


def batches(cfg, n):
    _, rows, _, batch, pos, _, _, _ = cfg
    g = torch.Generator().manual_seed(1)
    return [(torch.randint(0, rows, (batch, pos), generator=g),
             torch.randint(0, rows, (batch, pos), generator=g),
             torch.randint(0, 10, (batch,), generator=g)) for _ in range(n)]


def step(model, opts, x, y, t, clock=time.perf_counter):
    """One training step; returns the time of its forward and backward (zero_grad included)
    and of its optimizer step."""
    t0 = clock()
    for o in opts:
        o.zero_grad()
    nn.functional.cross_entropy(model(x, y), t).backward()
    t1 = clock()
    for o in opts:
        o.step()
    return t1 - t0, clock() - t1


def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def time_steps(model, opts, data, clock):
    """(time per step, minor page faults per step, time of forward and backward per step)"""
    f0, t0, fb = faults(), clock(), 0.0
    for x, y, t in data:
        fb += step(model, opts, x, y, t, clock)[0]
    n = len(data)
    return (clock() - t0) / n, (faults() - f0) / n, fb / n


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--cpu", action="store_true", help="time CPU time, not wall time")
    ap.add_argument("--model", action="append", choices=[c[0] for c in CONFIGS],
                    help="time this model only (repeatable; default: all)")
    a = ap.parse_args()
    clock = time.process_time if a.cpu else time.perf_counter
    torch.set_num_threads(a.threads)
    emb.set_num_threads(a.threads)
    print(f"threads {a.threads}, {a.steps} steps x {a.rounds} rounds, torch {torch.__version__}, "
          f"emb {emb.__version__}, {'CPU' if a.cpu else 'wall'} time")
    print(f"{'model':16} {'torch ms/step':>14} {'emb ms/step':>12} {'torch/emb':>10} "
          f"{'torch faults':>13} {'emb faults':>11} {'fwd+bwd torch/emb':>18} "
          f"{'in-bwd ms/step':>15} {'torch/in-bwd':>13} {'in-bwd faults':>14}  same bits")
    for cfg in QUICK if a.quick else CONFIGS:
        if a.model and cfg[0] not in a.model:
            continue
        models = {"torch": make((nn.Embedding, nn.EmbeddingBag), cfg),
                  "emb": make((et.Embedding, et.EmbeddingBag), cfg),
                  "in-bwd": make((et.Embedding, et.EmbeddingBag), cfg, in_backward=True)}
        warm = batches(cfg, 2)
        data = batches(cfg, a.steps)
        for m, o in models.values():
            for x, y, t in warm:
                step(m, o, x, y, t)
        best = {k: (float("inf"), 0, 0) for k in models}
        best_fb = {k: float("inf") for k in models}
        for _ in range(a.rounds):
            for name, model in models.items():
                r = time_steps(*model, data, clock)
                best[name] = min(best[name], r)
                best_fb[name] = min(best_fb[name], r[2])
        same = all(all(torch.equal(p, q) for p, q in zip(models["torch"][0].parameters(),
                                                          models[k][0].parameters()))
                   for k in ("emb", "in-bwd"))
        (tt, tf, _), (et_, ef, _), (it, if_, _) = best["torch"], best["emb"], best["in-bwd"]
        tfb, efb = best_fb["torch"], best_fb["emb"]
        print(f"{cfg[0]:16} {tt * 1e3:14.2f} {et_ * 1e3:12.2f} {tt / et_:10.2f} {tf:13.0f} "
              f"{ef:11.0f} {tfb / efb:18.2f} {it * 1e3:15.2f} {tt / it:13.2f} {if_:14.0f}  "
              f"{same}")


if __name__ == "__main__":
    main()
