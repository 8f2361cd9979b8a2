import sys
from pathlib import Path

# Test helper modules (fixtures_ogb.py) are imported by name from this folder.
sys.path.insert(0, str(Path(__file__).parent))
