"""train.py -- seeded, reproducible training of the sparsekv retrieval model (see README.md).

  /usr/bin/python3 tools/train/train.py --out /tmp/skvtrain            # the full run
  /usr/bin/python3 tools/train/train.py --preset smoke --out DIR         # a few steps (tests)

Writes DIR/ckpt.pt (state dict + config + step) after every phase and every --save-every steps
(and DIR/ckpt_stepN.pt at the end of each phase, N its last step),
and DIR/log.txt. The data stream depends only on --seed; eval prompts use seeds >= 10**6
(never used in training)."""
import argparse
import ctypes
import datetime
import json
import math
import os
import random
import sys
import time

# Debian's torch calls whatever libblas.so.3 is installed; with OpenBLAS (libopenblas0-pthread)
# one thread per process is fastest here: the work is many small matrix products
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


def keep_freed_memory():
    """Have glibc's malloc keep freed memory for reuse instead of returning it to the kernel.
    A step allocates and frees tens of MB of activations (the attention's score blocks are up
    to 8 MB each); by default every block over the mmap threshold is a fresh mapping whose pages
    fault in on first touch, and the faults cost as much as the arithmetic (measured: a step at
    4 x 1,024 tokens 0.73-0.80 s -> 0.61 s, at 16 x 256 0.5-1.1 s -> 0.48 s, no page faults
    after the first steps). The numbers a step computes are unchanged (tested bitwise on 40
    steps). mallopt's parameters: M_TRIM_THRESHOLD -1, M_TOP_PAD -2, M_MMAP_THRESHOLD -3."""
    try:
        libc = ctypes.CDLL(None)
        libc.mallopt(-3, 32 << 20)  # the largest threshold glibc accepts; bigger blocks are rare
        libc.mallopt(-1, 2**31 - 1)
        libc.mallopt(-2, 256 << 20)
    except (OSError, AttributeError):
        pass  # not glibc: slower, the same numbers


keep_freed_memory()
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import data  # noqa: E402
import model  # noqa: E402

# (max_len, batch, steps, mixture of data.MIXES) per curriculum phase. The "repeat" phase comes
# first: on repeated short random blocks an induction head forms in a few hundred steps
# (measured, 4 layers, lr 1e-3, 32 x 128 tokens: at ~300 steps with 4-16 character blocks; not
# by step 700 with 8-32), where the task mixture alone showed none after 600 steps of 16 x 256
# (lr 3e-3). The retrieval tasks then only have to use it. The learning rate stays at its peak
# through the repeat phase and decays by a cosine over the task phases.
#
# A preset is a list of stages, each with its own learning-rate schedule (warmup, then a cosine
# to 10% of its peak; the leading "repeat" phases stay at the peak when const_repeat is set), so
# that a stage appended to a preset (or tried with --then on a --resume'd checkpoint) leaves
# every step before it unchanged. Stage 1 of v2 was model v1 (passkey only). Stage 2 teaches
# lookups by content: the "recall2" mixture asks several questions per sample and lists pairs
# twice (kvq, mkq, kvrep in data.py), where stage 1's one question per prompt left kv and
# multikey at 0% (measured; what else was tried: docs/MODEL_retrieval.md). The lookups over
# 1,024 tokens come from steps at 1,024 tokens: 100 (v2) left kv at 2% and multikey at 49%,
# 1,500 (v3) 67% and 100% (sparsekv's eval, dense cache); v4 adds a third stage of 700 more at
# half the peak rate: kv 82%, multikey 96%; "full" (v5) is v4's stages in two processes
# (--procs 2, half the time): kv 94%, multikey 100% (sparsekv, 100 prompts).
#
# The attention's arithmetic is part of a run: whole_attn_upto keeps the whole-matrix attention
# (model.ATTN_CHUNK 0, what v1/v2 trained with) for the phases up to that length, so that the
# first 1,500 steps of "full" are v2's step for step; longer phases use blocks of attn_block
# rows (default model.ATTN_CHUNK; 10x faster than the whole matrix at 1,024 tokens).
# The shape and the stage-1 curriculum every shipped version shares (v1 was stage 1 alone), and
# the stage 2 of v3 and v4; a preset never mutates them (main copies what it overrides).
MODEL_CFG = dict(dim=128, n_layers=4, n_heads=4, n_kv_heads=2, hidden=352)
STAGE1_PHASES = [(128, 32, 500, "repeat"), (256, 16, 1000, "tasks"), (512, 8, 300, "tasks"),
                 (1024, 4, 250, "tasks")]
STAGE2_PHASES = [(256, 16, 500, "recall2"), (512, 8, 250, "recall2"), (1024, 4, 1500, "recall2")]
# "full" (v4's stages): stage 1 v2's, its first 1,500 steps exactly v2's (whole matrix up to 256
# tokens: passkey retrieval forms by step ~1,300-1,500), the longer phases in blocks; stage 3:
# more lookups at 1,024 tokens, a second cosine from half the peak
FULL_STAGES = [
    dict(cfg=MODEL_CFG, phases=STAGE1_PHASES, lr=1e-3, warmup=20, const_repeat=True,
         whole_attn_upto=256, attn_block=128),
    dict(phases=STAGE2_PHASES, lr=1e-3, warmup=20, attn_block=128),
    dict(phases=[(1024, 4, 700, "recall2")], lr=5e-4, warmup=20, attn_block=128),
]
PRESETS = {
    "full": FULL_STAGES,  # models/retrieval.gguf v5: v4's stages in two processes
    "v4": FULL_STAGES,  # models/retrieval.gguf v4 (2026-12-01, night): the same, one process
    "v3": [  # models/retrieval.gguf v3 (2026-12-01, evening)
        dict(cfg=MODEL_CFG, phases=STAGE1_PHASES, lr=1e-3, warmup=20, const_repeat=True,
             whole_attn_upto=512, attn_block=256),
        dict(phases=STAGE2_PHASES, lr=1e-3, warmup=20, attn_block=256),
    ],
    "v2": [  # models/retrieval.gguf v2 (2026-12-01), whole-matrix attention throughout
        dict(cfg=MODEL_CFG, phases=STAGE1_PHASES, lr=1e-3, warmup=20, const_repeat=True,
             whole_attn_upto=1024),
        dict(phases=[(256, 16, 500, "recall2"), (512, 8, 200, "recall2"),
                     (1024, 4, 100, "recall2")], lr=1e-3, warmup=20, whole_attn_upto=1024),
    ],
    "smoke": [
        dict(cfg=dict(dim=32, n_layers=2, n_heads=4, n_kv_heads=2, hidden=64, max_seq_len=256),
             phases=[(64, 2, 3, "repeat"), (256, 2, 3, "tasks")], lr=3e-3, warmup=1),
        dict(phases=[(256, 2, 2, "recall2")], lr=3e-3, warmup=1),
    ],
}
# The processes a preset trains with by default (--procs): the data-parallel sum rounds
# differently from one process, and rounding moves the step at which retrieval forms, so the
# process count is part of a preset's arithmetic, like its attention blocks.
PRESET_PROCS = {"full": 2}
ANSWER_WEIGHT = 4.0  # extra weight of the answer tokens in the loss
DEFAULT_ATTN_CHUNK = model.ATTN_CHUNK  # model.py's default, before train.py sets it per phase


def stage_lr(st, local):
    """Learning rate of a stage's step local (0-based): linear warmup, the leading repeat phases
    at the peak when const_repeat is set, then a cosine to 10% of the peak over the rest."""
    total = sum(p[2] for p in st["phases"])
    n_const = (sum(p[2] for p in st["phases"] if p[3] == "repeat")
               if st.get("const_repeat") else 0)
    lr = st["lr"] * min(1.0, (local + 1) / st["warmup"])
    if local >= n_const:
        t = (local - n_const) / max(1, total - n_const)
        lr *= 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * t))
    return lr


def phase_attn_chunk(st, max_len, override=None):
    """model.ATTN_CHUNK for a phase of max_len tokens in stage st: the whole matrix (0) up to the
    stage's whole_attn_upto, blocks of its attn_block rows (default model.ATTN_CHUNK as loaded)
    above; override (--attn-chunk) wins. With the blocked attention's rounding everywhere, the v2
    preset formed no passkey retrieval by step 2,200 (the whole-matrix run had it at ~1,300):
    runs are that sensitive to rounding, so a preset names its arithmetic."""
    if override is not None:
        return override
    if max_len <= st.get("whole_attn_upto", 0):
        return 0
    return st.get("attn_block", DEFAULT_ATTN_CHUNK)


def adamw(params, lr):
    return torch.optim.AdamW(params, lr=lr, betas=(0.9, 0.95), weight_decay=0.01)


def grow_layers(m, opt, n_new, at):
    """Insert n_new fresh layers before layer index at (None: after the last), in place, and
    return an AdamW over all parameters that keeps the old parameters' moments. A new layer's
    output projections (wo, w2) start at zero, so the grown model computes exactly what it did
    (the residual passes through) and the new layers start from the gradient alone."""
    cfg = m.cfg
    at = cfg.n_layers if at is None else at
    for i in range(n_new):
        b = model.Block(cfg)
        for n, p in b.named_parameters():
            if n.endswith("wo.weight") or n.endswith("w2.weight"):
                torch.nn.init.zeros_(p)
            elif p.dim() == 2:
                torch.nn.init.normal_(p, 0.0, 0.02)
        m.layers.insert(at + i, b)
    cfg.n_layers += n_new
    new = adamw(m.parameters(), opt.param_groups[0]["lr"])
    for p, state in opt.state.items():
        new.state[p] = state
    return new


def collate(samples):
    """samples: (ids, answer start | [answer starts] | None)."""
    T = max(len(s[0]) for s in samples) - 1
    x = torch.zeros(len(samples), T, dtype=torch.long)
    y = torch.full((len(samples), T), -100, dtype=torch.long)
    w = torch.zeros(len(samples), T)
    for i, (ids, a) in enumerate(samples):
        n = len(ids) - 1
        x[i, :n] = torch.tensor(ids[:-1])
        y[i, :n] = torch.tensor(ids[1:])
        w[i, :n] = 1.0
        if isinstance(a, int):
            w[i, a - 1:n] += ANSWER_WEIGHT  # targets a.. are the answer (and EOS)
        elif a is not None:
            for s in a:  # several answers: targets s..s+6 are " NNNNN."
                w[i, s - 1:min(n, s + 6)] += ANSWER_WEIGHT
    return x, y, w


def loss_fn(m, x, y, w, total=None):
    """Weighted token cross-entropy, divided by total (default: w's sum; data parallel passes
    the whole batch's)."""
    logits = m(x)
    ce = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1),
                         ignore_index=-100, reduction="none")
    return (ce * w.reshape(-1)).sum() / (w.sum() if total is None else total)


def answer_correct(m, samples):
    """Exact match of the teacher-forced argmax over the answer's 5 digits (equals greedy
    decoding's exact match)."""
    out = []
    with torch.no_grad():
        for ids, a in samples:
            x = torch.tensor([ids[:-1]])
            pred = m(x)[0].argmax(-1)
            tgt = torch.tensor(ids[1:])
            # answer tokens: a (space) .. a+5 (digits)
            p, g = pred[a - 1:a + 6], tgt[a - 1:a + 6]
            out.append(len(g) == 7 and bool((p == g).all()))
    return out


def eval_tasks(m, max_len, n=20, depths=(0.1, 0.3, 0.5, 0.7, 0.9), seed0=10**6):
    """Accuracy per task at full length max_len, prompts from seeds seed0 + i (never trained)."""
    res = {}
    for ti, task in enumerate(("passkey", "kv", "multikey")):
        samples = []
        for i in range(n):
            d = depths[i % len(depths)]
            rng = random.Random(seed0 + 1000 * ti + i)
            samples.append(data.make_sample(rng, task, max_len, depth=d, full=True))
        res[task] = sum(answer_correct(m, samples)) / n
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="full", choices=sorted(PRESETS))
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--threads", type=int, default=1, help="threads per process")
    ap.add_argument("--procs", type=int,
                    help="processes training in data parallel (gloo), one batch split among "
                    "them (default: the preset's, %s; else 1)" % json.dumps(PRESET_PROCS))
    ap.add_argument("--save-every", type=int, default=25)
    ap.add_argument("--eval-n", type=int, default=20)
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--phases", help="JSON list overriding the last stage's phases")
    ap.add_argument("--cfg", help="JSON dict overriding the preset's model config")
    ap.add_argument("--then", help="JSON list of phases: a stage appended after the preset's "
                    "(its own warmup and cosine; with --resume, an experiment on a finished run)")
    ap.add_argument("--grow", help='JSON dict: the last stage first grows the model, e.g. '
                    '{"n_layers": 5, "at": 3} inserts a fresh layer before layer 3')
    ap.add_argument("--ema", help="decays (comma-separated) of running averages of the weights "
                    "over the last stage; its result is the first one's average")
    ap.add_argument("--lr", type=float, help="peak learning rate of the last stage")
    ap.add_argument("--attn-chunk", type=int,
                    help="query rows per attention block in every phase (0: whole matrix), "
                    "overriding the stages' whole_attn_upto and attn_block (default: whole "
                    "matrix up to that length, blocks of attn_block rows above, %d unless the "
                    "stage sets it)" % model.ATTN_CHUNK)
    ap.add_argument("--eval-every", type=int, default=0,
                    help="also evaluate every N steps at the phase's length (0: after phases)")
    args = ap.parse_args()
    if args.procs is None:
        args.procs = PRESET_PROCS.get(args.preset, 1)
    stages = [dict(st) for st in PRESETS[args.preset]]
    if args.phases:
        stages[-1]["phases"] = [tuple(p) for p in json.loads(args.phases)]
    if args.then:
        # the appended stage keeps the last stage's attention arithmetic (v3's blocks of 256,
        # v2's whole matrix), so that an experiment on a finished run continues it
        stages.append(dict(phases=[tuple(p) for p in json.loads(args.then)],
                           lr=stages[-1]["lr"], warmup=20,
                           **{k: stages[-1][k] for k in ("whole_attn_upto", "attn_block")
                              if k in stages[-1]}))
    if args.lr:
        stages[-1]["lr"] = args.lr
    if args.ema:
        stages[-1]["ema"] = [float(x) for x in args.ema.split(",")]
    if args.grow:
        stages[-1]["grow"] = json.loads(args.grow)
    if args.cfg:
        stages[0]["cfg"] = dict(stages[0]["cfg"], **json.loads(args.cfg))
    if args.procs <= 1:
        run(args, stages)
        return
    small = [p for st in stages for p in st["phases"] if p[1] < args.procs]
    if small:
        raise SystemExit("--procs %d: phases with a smaller batch: %s" % (args.procs, small))
    # data parallel: every process draws the same batches and trains on its share of the
    # samples; the gradients are summed, so a step is the single process's step up to rounding
    os.makedirs(args.out, exist_ok=True)
    init = os.path.join(os.path.abspath(args.out), ".ddp_init")
    if os.path.exists(init):
        os.remove(init)
    torch.multiprocessing.spawn(_worker, args=(args, stages, init), nprocs=args.procs)


def _worker(rank, args, stages, init):
    import torch.distributed as dist
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # the processes share this machine
    # (rank 0 evaluates while the others wait in the next all-reduce: a long timeout)
    dist.init_process_group("gloo", init_method="file://" + init, rank=rank,
                            world_size=args.procs, timeout=datetime.timedelta(hours=6))
    try:
        run(args, stages, rank)
    finally:
        dist.destroy_process_group()


def step_grads(m, samples, rank, procs):
    """Loss and gradients of one step. One process: loss_fn on the whole batch. Several: this
    process's samples (every procs-th from rank) weighted by the whole batch's weight sum,
    then the gradients and losses summed over the processes (one all-reduce)."""
    if procs <= 1:
        loss = loss_fn(m, *collate(samples))
        loss.backward()
        return loss.item()
    import torch.distributed as dist
    loss = loss_fn(m, *collate(samples[rank::procs]), total=collate(samples)[2].sum())
    loss.backward()
    params = list(m.parameters())
    flat = torch.cat([p.grad.reshape(-1) for p in params] + [loss.detach().reshape(1)])
    dist.all_reduce(flat)
    o = 0
    for p in params:
        p.grad.copy_(flat[o:o + p.numel()].view_as(p))
        o += p.numel()
    return flat[-1].item()


def run(args, stages, rank=0):
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    os.makedirs(args.out, exist_ok=True)
    cfg = model.Config(**stages[0]["cfg"])
    m = model.Transformer(cfg)
    opt = adamw(m.parameters(), stages[0]["lr"])
    rng = random.Random(args.seed)
    step = 0
    logf = open(os.path.join(args.out, "log.txt"), "a") if rank == 0 else None

    def log(s):
        if rank == 0:  # one process logs, saves and evaluates
            print(s, flush=True)
            logf.write(s + "\n")
            logf.flush()

    ema = {}  # decay -> {name: tensor}: running averages of the weights in a stage with "ema"

    def save(tag="ckpt.pt"):
        if rank != 0:
            return
        torch.save({"model": m.state_dict(), "cfg": cfg.__dict__, "step": step,
                    "opt": opt.state_dict(), "rng": rng.getstate(),
                    "torch_rng": torch.get_rng_state(), "ema": ema},
                   os.path.join(args.out, tag))

    start_step = 0
    if args.resume and os.path.exists(os.path.join(args.out, "ckpt.pt")):
        ck = torch.load(os.path.join(args.out, "ckpt.pt"))
        if ck["cfg"]["n_layers"] != cfg.n_layers:  # a checkpoint after a stage's grow
            cfg = model.Config(**ck["cfg"])
            m = model.Transformer(cfg)
            opt = adamw(m.parameters(), stages[0]["lr"])
        m.load_state_dict(ck["model"])
        opt.load_state_dict(ck["opt"])
        rng.setstate(ck["rng"])
        torch.set_rng_state(ck["torch_rng"])
        ema = ck.get("ema", {})
        start_step = ck["step"]
    log("config %s params %d stages %s" % (
        json.dumps(cfg.__dict__), sum(p.numel() for p in m.parameters()),
        [(st["lr"], st["phases"]) for st in stages]))
    t0 = time.time()
    losses = []
    stage_start = 0
    for st in stages:
        n_steps = sum(p[2] for p in st["phases"])
        g = st.get("grow")
        if g and step >= start_step and cfg.n_layers < g["n_layers"]:
            opt = grow_layers(m, opt, g["n_layers"] - cfg.n_layers, g.get("at"))
            log("grew to %d layers (new ones at %s): params %d" % (
                cfg.n_layers, g.get("at"), sum(p.numel() for p in m.parameters())))
        if st.get("ema") and step >= start_step and step == stage_start:
            ema = {d: {k: v.detach().clone() for k, v in m.state_dict().items()}
                   for d in st["ema"]}
        elif (st.get("ema") and stage_start < start_step < stage_start + n_steps
              and set(ema) != set(st["ema"])):
            raise SystemExit("the checkpoint (step %d) has averages for decays %s, not %s: "
                             "resume with the --ema it was started with"
                             % (start_step, sorted(ema), st["ema"]))
        for phase in st["phases"]:
            max_len, batch, steps, mix = phase
            model.ATTN_CHUNK = phase_attn_chunk(st, max_len, args.attn_chunk)
            for _ in range(steps):
                if step < start_step:  # replay the data stream on resume
                    step += 1
                    continue
                lr = stage_lr(st, step - stage_start)
                for g in opt.param_groups:
                    g["lr"] = lr
                opt.zero_grad()
                loss = step_grads(m, data.make_batch(rng, batch, max_len, mix), rank,
                                  args.procs)
                torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
                opt.step()
                if st.get("ema"):
                    with torch.no_grad():
                        for d, avg in ema.items():
                            for k, v in m.state_dict().items():
                                avg[k].mul_(d).add_(v, alpha=1 - d)
                step += 1
                losses.append(loss)
                if step % 5 == 0 or step == 1:
                    log("step %d len %d loss %.4f lr %.2e t %.0fs" % (
                        step, max_len, loss, lr, time.time() - t0))
                if step % args.save_every == 0:
                    save()
                if rank == 0 and args.eval_every and step % args.eval_every == 0:
                    m.eval()
                    log("eval at len %d step %d: %s (t %.0fs)" % (
                        max_len, step, json.dumps(eval_tasks(m, max_len, args.eval_n)),
                        time.time() - t0))
                    m.train()
            if step <= start_step:
                continue  # a phase the checkpoint had finished
            save()
            save("ckpt_step%d.pt" % step)  # each phase's end kept: resume points for experiments
            if rank == 0 and args.eval_n > 0:
                log("eval at len %d step %d: %s (t %.0fs)" % (
                    max_len, step, json.dumps(eval_tasks(m, max_len, args.eval_n)),
                    time.time() - t0))
        if st.get("ema") and ema:  # (empty once applied, also when resumed after that)
            # the stage's result is the running average of its weights (the first decay's);
            # the last weights and the other decays' averages are kept beside it
            save("ckpt_step%d_last.pt" % step)
            for d in st["ema"][1:]:
                m.load_state_dict(ema[d])
                save("ckpt_step%d_ema%g.pt" % (step, d))
            m.load_state_dict(ema[st["ema"][0]])
            ema = {}
            save()
            save("ckpt_step%d.pt" % step)
            if rank == 0 and args.eval_n > 0:
                log("eval of the weights' average (decay %g) at step %d: %s" % (
                    st["ema"][0], step, json.dumps(eval_tasks(m, max_len, args.eval_n))))
        stage_start += n_steps
    if args.procs > 1:  # the processes must have taken the same steps
        import torch.distributed as dist
        with torch.no_grad():
            mine = torch.stack([p.double().sum() for p in m.parameters()])
        every = [torch.zeros_like(mine) for _ in range(args.procs)]
        dist.all_gather(every, mine)
        if not all(torch.equal(e, mine) for e in every):
            raise RuntimeError("the processes' weights differ")
    log("done step %d t %.0fs first-loss %.4f last-loss %.4f" % (
        step, time.time() - t0, losses[0] if losses else float("nan"),
        losses[-1] if losses else float("nan")))


if __name__ == "__main__":
    main()
