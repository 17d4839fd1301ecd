"""Writing and hashing the files export and weights make.

torch 1.13's writer aborts the process when the disk fills (its zip writer throws from a
destructor: exit 134, a traceback of C++ frames, the partial file left behind), so the free space
is checked before a write, where a refusal can say so. A hash reads its file in blocks: read
whole, a model file was held in memory once more only to be hashed."""
import hashlib
import os


def check_room(path, needed):
    """Raises OSError where the folder of `path` has less free space than `needed` bytes."""
    folder = os.path.dirname(os.path.abspath(path))
    st = os.statvfs(folder)
    free = st.f_bavail * st.f_frsize
    if needed > free:
        raise OSError(f"it needs about {needed / 2**20:.1f} MiB and {folder} has {free / 2**20:.1f} MiB free")


def file_sha256(path):
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
