"""Breaks a safetensors file in one named way (for corrupt_checkpoint_test.sh and the bad-input
suite, tests/bad_input/run_cases.sh)."""
import json
import os
import struct
import sys

path, kind = sys.argv[1], sys.argv[2]
raw = open(path, 'rb').read()
n = struct.unpack('<Q', raw[:8])[0]
header = json.loads(raw[8:8 + n])
data = raw[8 + n:]

if kind == 'truncate':
    open(path, 'wb').write(raw[:-1000])
    sys.exit(0)
if kind == 'nan':  # a BF16 NaN as the first weight of layer 2's shared expert down_proj
    t = header['model.layers.2.mlp.shared_experts.down_proj.weight']
    assert t['dtype'] == 'BF16'
    at = 8 + n + t['data_offsets'][0]
    open(path, 'wb').write(raw[:at] + b'\xc0\x7f' + raw[at + 2:])
    sys.exit(0)
if kind == 'bad_json':
    open(path, 'wb').write(raw[:8] + b'{"x": [' + b' ' * (n - 7) + data)
    sys.exit(0)
if kind == 'offsets':
    t = header['lm_head.weight']
    size = t['data_offsets'][1] - t['data_offsets'][0]
    t['data_offsets'] = [len(data), len(data) + size]
elif kind == 'missing':
    del header['model.layers.3.mlp.experts.30.down_proj.weight']
elif kind == 'extra':
    header['model.layers.0.self_attn.bogus.weight'] = dict(header['model.norm.weight'])
elif kind == 'shape':
    t = header['model.layers.1.self_attn.q_a_layernorm.weight']
    t['shape'] = [t['shape'][0] // 2, 2]
elif kind == 'dtype':  # BF16 [256] -> F8 [256] over the first half of its bytes
    t = header['model.norm.weight']
    t['dtype'] = 'F8_E4M3'
    t['data_offsets'][1] = t['data_offsets'][0] + t['shape'][0]
elif kind == 'size':  # BF16 [128] declared over 512 bytes
    t = header['model.norm.weight']
    t['shape'] = [t['shape'][0] // 2]
else:
    sys.exit('unknown kind ' + kind)
text = json.dumps(header).encode()
text += b' ' * ((8 - len(text) % 8) % 8)
open(path, 'wb').write(struct.pack('<Q', len(text)) + text + data)
