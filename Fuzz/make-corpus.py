#!/usr/bin/env python3
"""Seeds a libFuzzer corpus for one entry point from the vector files in TestVectors/."""
import base64, json, os, sys

entry, out = sys.argv[1], sys.argv[2]
os.makedirs(out, exist_ok=True)
root = os.path.join(os.path.dirname(__file__), "..", "TestVectors")
count = 0
for name in sorted(os.listdir(root)):
    if not name.endswith(".json"):
        continue
    for v in json.load(open(os.path.join(root, name)))["vectors"]:
        blobs = []
        if v["kind"] == "attestation":
            obj = base64.b64decode(v["attestation"])
            key = base64.b64decode(v["keyId"])
            if entry == "attestation":
                blobs.append(key + obj)
            elif entry == "cbor":
                blobs.append(obj)
            elif entry == "authdata":
                i = obj.find(b"authDataY")
                if i >= 0:
                    n = int.from_bytes(obj[i + 9:i + 11], "big")
                    blobs.append(obj[i + 11:i + 11 + n])
        else:
            obj = base64.b64decode(v["assertion"])
            if entry in ("assertion", "cbor"):
                blobs.append(obj)
            elif entry == "authdata":
                i = obj.find(b"authenticatorDataX")
                if i >= 0:
                    n = obj[i + 18]
                    blobs.append(obj[i + 19:i + 19 + n])
        for blob in blobs:
            with open(os.path.join(out, f"{name}-{v['id']}"), "wb") as f:
                f.write(blob)
            count += 1
print(f"{count} seeds in {out}")
