"""Writes a hand-made expert placement (docs/placement-format.md) for the EP tests.

Usage: make_placement.py KIND CONFIG_JSON OUT_JSON
KIND "skewed4": 4 ranks on one machine, non-uniform expert counts per rank and replicas of
hot experts on other ranks (different per layer), topology-aware routing.
"""
import json
import sys

kind, config_path, out_path = sys.argv[1:4]
cfg = json.load(open(config_path))
n = cfg["n_routed_experts"]
assert kind == "skewed4", kind
layers = []
# DeepSeek-V4 has no dense layers (no first_k_dense_replace): every layer is placed.
for layer in range(cfg.get("first_k_dense_replace", 0), cfg["num_hidden_layers"]):
    # Primary owners: slices of 40%, 25%, 20%, 15% of the experts, rotated per layer.
    cuts = [0, int(n * 0.40), int(n * 0.65), int(n * 0.85), n]
    owner = {}
    for r in range(4):
        for e in range(cuts[r], cuts[r + 1]):
            owner[(e + layer * 3) % n] = r
    ranks = [[e for e in range(n) if owner[e] == r] for r in range(4)]
    copies = [[[owner[e], 1.0]] for e in range(n)]
    # Replicate two experts of the biggest rank onto the two smallest ones, unequal weights.
    for i, dst in enumerate((3, 2)):
        e = ranks[0][i]
        ranks[dst].append(e)
        copies[e] = [[0, 0.4], [dst, 0.6]]
    layers.append({"layer": layer, "ranks": ranks, "copies": copies})
placement = {
    "format": "epserve-placement", "version": 1, "strategy": "test", "routing": "topo",
    "topology": {"num_nodes": 1, "ranks_per_node": 4},
    "model": {"name": "test", "num_experts": n, "top_k": cfg["num_experts_per_tok"],
              "hidden_size": cfg["hidden_size"], "moe_intermediate_size": cfg["moe_intermediate_size"],
              "num_hidden_layers": cfg["num_hidden_layers"], "num_expert_groups": cfg.get("n_group", 1)},
    "layers": layers,
}
json.dump(placement, open(out_path, "w"))
