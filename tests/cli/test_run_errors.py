"""Bad input to `zctl run` gets one clear message (what, where, what to do) and a non-zero exit,
never a crash: malformed JSON with line and column, unknown keys with the closest key
suggested, unsupported keys, inconsistent batch sizes naming all three, missing and truncated
data shards, a shard with a wrong magic, an init file whose shape disagrees with the config,
a block_size larger than a shard allows, a checkpoint to resume that does not exist, device
"cuda" on a machine without a usable GPU (or a build without CUDA)."""
import json
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.join(os.environ.get("ZT_SOURCE_DIR", "."), "tests"))
import ztutil as zu  # noqa: E402


def good_job():
    return {"name": "e",
            "model": {"n_layer": 1, "n_head": 2, "n_embd": 32, "block_size": 16, "vocab_size": 64},
            "data": {"train": "data/t_*.bin"},
            "train": {"steps": 1, "checkpoint_dir": "ckpt/e"},
            "resources": {"ranks": 1},
            "deepspeed": {"train_batch_size": 4}}


def main():
    failures = []
    with tempfile.TemporaryDirectory(prefix="zt-err-") as tmp:
        os.makedirs(f"{tmp}/data")
        rng = np.random.default_rng(1)
        zu.write_shard(f"{tmp}/data/t_000.bin", rng.integers(0, 64, 500))

        def case(label, text, needles, setup=None, args=(), rc=2):
            path = f"{tmp}/{label}.json"
            with open(path, "w") as f:
                f.write(text if isinstance(text, str) else json.dumps(text, indent=1))
            if setup:
                setup()
            r = zu.run_zctl(["run", *args, path], cwd=tmp)
            msg = r.stderr.strip()
            ok = r.returncode == rc and all(n in msg for n in needles)
            ok = ok and "Sanitizer" not in msg and r.returncode < 128
            ok = ok and not os.path.exists(f"{tmp}/ckpt/e/logs/rank_00000.log")  # refused before start
            print(f"{label}: rc {r.returncode}: {msg.splitlines()[-1] if msg else ''}")
            if not ok:
                failures.append(f"{label}: rc {r.returncode}, wanted {rc} and {needles} in:\n{msg}")

        case("malformed", '{\n  "name": "e",\n  "model": {"n_layer": 1,,}\n}',
             ["malformed.json:3:26:"])
        j = good_job()
        j["deepspeed"]["zero_optimization"] = {"stag": 1}
        case("unknown", j, ["unknown.json:", "zero_optimization.stag", 'did you mean "stage"'])
        j = good_job()
        j["deepspeed"]["pipeline"] = {"stages": 2}
        case("unsupported", j, ["unsupported.json:", "pipeline", "does not offer"])
        j = good_job()
        j["deepspeed"].update({"train_batch_size": 10, "train_micro_batch_size_per_gpu": 3,
                               "gradient_accumulation_steps": 2})
        case("batch", j, ["batch.json:", "train_batch_size 10", "train_micro_batch_size_per_gpu 3",
                          "gradient_accumulation_steps 2"])
        j = good_job()
        j["data"]["train"] = "nodata/x_*.bin"
        case("missing_data", j, ["data.train: ", "nodata/x_*.bin"])
        j = good_job()
        j["data"]["val"] = "noval/v_*.bin"  # checked even with eval_every 0
        case("missing_val", j, ["data.val: ", "noval/v_*.bin"])

        def truncated():
            with open(f"{tmp}/data/t_000.bin", "rb") as f:
                b = f.read()
            os.makedirs(f"{tmp}/trunc", exist_ok=True)
            with open(f"{tmp}/trunc/t_000.bin", "wb") as f:
                f.write(b[:-10])
        j = good_job()
        j["data"]["train"] = "trunc/t_*.bin"
        case("truncated", j, ["trunc/t_000.bin"], setup=truncated)

        def magic():
            os.makedirs(f"{tmp}/magic", exist_ok=True)
            with open(f"{tmp}/data/t_000.bin", "rb") as f:
                b = bytearray(f.read())
            struct.pack_into("<i", b, 0, 12345)
            with open(f"{tmp}/magic/t_000.bin", "wb") as f:
                f.write(b)
        j = good_job()
        j["data"]["train"] = "magic/t_*.bin"
        case("magic", j, ["magic/t_000.bin", "magic"], setup=magic)

        def init_file():
            cfg = dict(L=2, NH=2, C=32, T=16, V=64, Vp=128)
            zu.write_model(f"{tmp}/init2.bin", cfg, zu.random_model(cfg, 1))
        j = good_job()
        j["model"]["init"] = "init2.bin"
        case("init_shape", j, ["init2.bin", "n_layer"], setup=init_file)
        j = good_job()
        j["model"]["block_size"] = 1024
        case("block_size", j, ["t_000.bin", "1024"])
        case("no_ckpt", good_job(), ["nothing-here"], args=["--resume", f"{tmp}/nothing-here"])
        # device "cuda" where no GPU can be used: the worker says why and what to set
        probe = os.path.join(os.environ.get("ZT_BUILD_DIR", "build"), "tests", "zt_gpu_probe")
        if os.path.exists(probe) and subprocess.run([probe], capture_output=True).returncode == 0:
            print("no_gpu: skipped, this machine has a usable GPU")
        else:
            j = good_job()
            j["resources"]["device"] = "cuda"
            zu.write_job(f"{tmp}/cuda.json", j)
            r = zu.run_zctl(["run", f"{tmp}/cuda.json"], cwd=tmp)
            msg = r.stdout + r.stderr
            print(f"no_gpu: rc {r.returncode}: {msg.strip().splitlines()[0] if msg.strip() else ''}")
            if r.returncode in (0, 1) or r.returncode >= 128 or 'resources.device to \"cpu\"' not in msg \
                    or ("no usable CUDA GPU" not in msg and "built without CUDA" not in msg):
                failures.append(f"no_gpu: rc {r.returncode}:\n{msg}")
        r = zu.run_zctl(["run", f"{tmp}/does-not-exist.json"])
        print(f"missing job file: rc {r.returncode}: {r.stderr.strip()}")
        if r.returncode != 2 or "does-not-exist.json" not in r.stderr:
            failures.append(f"missing job file: rc {r.returncode} {r.stderr}")
        r = zu.run_zctl(["run", "--nproc", "zero", f"{tmp}/malformed.json"])
        if r.returncode != 2 or "--nproc" not in r.stderr:
            failures.append(f"--nproc zero: rc {r.returncode} {r.stderr}")
    if failures:
        print("FAILURES:\n  " + "\n\n  ".join(failures))
        sys.exit(1)
    print("ok")


if __name__ == "__main__":
    main()
