"""The demo's promise, checked with zerotrain itself: examples/tiny.json trained on the default
synthetic corpus (`zctl data synth`) ends with a validation loss within 10% of the corpus's
printed entropy floor."""
import json
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.join(os.environ.get("ZT_SOURCE_DIR", "."), "tests"))
import ztutil as zu  # noqa: E402


def main():
    src = os.path.join(os.environ.get("ZT_SOURCE_DIR", "."), "examples", "tiny.json")
    with tempfile.TemporaryDirectory(prefix="zt-demo-") as tmp:
        shutil.copy(src, f"{tmp}/tiny.json")
        r = zu.run_zctl(["data", "synth", "--out", f"{tmp}/data"])
        assert r.returncode == 0, r.stderr
        floor = json.load(open(f"{tmp}/data/synth_meta.json"))["entropy_floor_nats"]
        r = zu.run_zctl(["run", f"{tmp}/tiny.json"], cwd=tmp, timeout=1500)
        if r.returncode != 0:
            sys.exit(f"zctl run failed:\n{r.stderr}")
        vals = [float(s["val_loss"]) for s in zu.parse_step_lines(r.stdout) if "val_loss" in s]
        gap = (vals[-1] - floor) / floor
        print(f"validation loss by evaluation: {vals}; floor {floor:.4f}; final {gap:.1%} above")
        if gap > 0.10:
            sys.exit(f"final validation loss {vals[-1]:.4f} is {gap:.1%} above the floor {floor:.4f}")
    print("ok")


if __name__ == "__main__":
    main()
