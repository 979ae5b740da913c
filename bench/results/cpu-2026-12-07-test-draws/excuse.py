import sys

import torch

sys.path.insert(0, "/work/main/python/tests")
import test_diffusers_models as t

torch.set_num_threads(1)
name = sys.argv[1]
for seed in map(int, sys.argv[2:]):
    r = t.run_model(name, seed)
    calls = t.record_served_calls(name, r)
    print(
        seed,
        "grad",
        "{:.2e}".format(r["grad"]["rel_l2"]),
        "calls",
        None if calls is None else len(calls),
        "grads seen",
        None if calls is None else sum(c["grad"] is not None for c in calls),
        "exact",
        t.served_calls_exact(name, r),
    )
