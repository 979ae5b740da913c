import random
import sys

import torch

sys.path.insert(0, "/work/main/python/tests")
import test_diffusers_models as t

torch.set_num_threads(1)
name = sys.argv[1]
n = int(sys.argv[2])
worst = []
for _i in range(n):
    seed = random.SystemRandom().randrange(1, 2**62)
    r = t.run_model(name, seed)
    g = r["grad"]
    ok = g["rel_l2"] == 0 or t.backward_within_gate(g)
    line = f"seed {seed} grad rel {g['rel_l2']:.2e} max_abs {g['max_abs']:.2e} maxref {g['max_ref']:.2e} cos {g['cos']:.8f} ok {ok}"
    if not ok:
        _, gs, _ = t.forward_backward(r["model"], r["inputs"], r["weights"], True)
        s = t.metrics(gs.numpy(), r["grad64"].numpy())
        line += f" | sdpa rel {s['rel_l2']:.2e} max_abs {s['max_abs']:.2e}"
    print(line, flush=True)
