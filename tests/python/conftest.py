# Make the in-tree package importable without installing it; the library is
# found via $MINFER_LIB or <repo>/build/libminfer.so (python/minfer/_lib.py).
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "python"))
