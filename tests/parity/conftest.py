import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# tests/shared_data.py: the data some tests read from outside the repository
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
