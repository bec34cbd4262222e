import sys
from pathlib import Path

# The tests import the bench kit (workload generator, process helpers) from the repo root.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
