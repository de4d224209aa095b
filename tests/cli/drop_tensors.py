"""Rewrites a safetensors file without the tensors whose names start with PREFIX, as a conversion
that dropped the MTP module does (for real_checkpoints_test.sh).
Usage: drop_tensors.py FILE PREFIX"""
import json
import struct
import sys

path, prefix = sys.argv[1], sys.argv[2]
raw = open(path, 'rb').read()
n = struct.unpack('<Q', raw[:8])[0]
header = json.loads(raw[8:8 + n])
data = raw[8 + n:]
out_header, chunks, at = {}, [], 0
for name, t in sorted(header.items(), key=lambda kv: kv[1]['data_offsets'][0] if kv[0] != '__metadata__' else -1):
    if name == '__metadata__':
        out_header[name] = t
        continue
    if name.startswith(prefix):
        continue
    begin, end = t['data_offsets']
    pad = (8 - at % 8) % 8  # every tensor 8-byte aligned, as epserve's writer keeps them
    chunks.append(b'\0' * pad)
    at += pad
    chunks.append(data[begin:end])
    out_header[name] = dict(t, data_offsets=[at, at + end - begin])
    at += end - begin
dropped = len(header) - len(out_header)
if dropped == 0:
    sys.exit(f'{path}: no tensor starts with {prefix}')
text = json.dumps(out_header).encode()
text += b' ' * ((8 - len(text) % 8) % 8)
open(path, 'wb').write(struct.pack('<Q', len(text)) + text + b''.join(chunks))
print(f'dropped {dropped} tensors starting with {prefix}')
