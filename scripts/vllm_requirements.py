"""Print a wheel's unconditional requirements (Requires-Dist without an `extra ==` marker),
leaving out torch, torchaudio, torchvision and torchcodec (the CPU torch is pinned separately)."""
import sys
import zipfile
from email.parser import Parser

SKIPPED = {"torch", "torchaudio", "torchvision", "torchcodec"}


def requirement_name(line: str) -> str:
    head = line.split(";")[0].strip()
    for sep in "<>=!~[ (":
        head = head.split(sep)[0]
    return head.strip().lower().replace("_", "-")


def wheel_requirements(path: str) -> list[str]:
    with zipfile.ZipFile(path) as wheel:
        name = next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
        meta = Parser().parsestr(wheel.read(name).decode())
    kept = []
    for line in meta.get_all("Requires-Dist") or []:
        if "extra ==" in line or requirement_name(line) in SKIPPED:
            continue
        kept.append(line)
    return kept


if __name__ == "__main__":
    print("\n".join(wheel_requirements(sys.argv[1])))
