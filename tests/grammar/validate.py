#!/usr/bin/python3
"""Validates grammar_sample's outputs against their schemas with an independent validator
(the python3-jsonschema package, Draft 2020-12): every output must parse as JSON and validate,
and every schema must have at least --min-per-schema outputs.

usage: validate.py SCHEMAS_JSON OUTPUTS_JSONL [--min-per-schema N]
"""
import argparse
import json
import sys

import jsonschema


def openapi_nullable(schema):
    """OpenAPI 3.0's {"nullable": true} (which the grammar honours) as JSON Schema: null allowed."""
    if isinstance(schema, list):
        return [openapi_nullable(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: openapi_nullable(v) for k, v in schema.items()}
    if out.pop("nullable", False) is True:
        return {"anyOf": [out, {"type": "null"}]}
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("schemas")
    ap.add_argument("outputs")
    ap.add_argument("--min-per-schema", type=int, default=5)
    args = ap.parse_args()
    with open(args.schemas, encoding="utf-8") as f:
        schemas = json.load(f)
    counts = [0] * len(schemas)
    failures = []
    with open(args.outputs, encoding="utf-8") as f:
        for line_no, line in enumerate(f, 1):
            rec = json.loads(line)
            idx = rec["schema"]
            entry = schemas[idx]
            counts[idx] += 1
            where = f"line {line_no}, schema {idx} ({entry['name']})"
            if not rec.get("complete", False):
                failures.append(f"{where}: output not complete: {rec['output']!r}")
                continue
            try:
                value = json.loads(rec["output"])
            except json.JSONDecodeError as e:
                failures.append(f"{where}: not JSON ({e}): {rec['output']!r}")
                continue
            schema = openapi_nullable(entry["schema"])
            cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
            errors = list(cls(schema).iter_errors(value))
            if errors:
                failures.append(f"{where}: {errors[0].message}: {rec['output']!r}")
    for idx, n in enumerate(counts):
        if n < args.min_per_schema:
            failures.append(f"schema {idx} ({schemas[idx]['name']}): {n} outputs, want >= {args.min_per_schema}")
    total = sum(counts)
    for f in failures[:20]:
        print(f)
    print(f"{total} outputs of {len(schemas)} schemas: {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
