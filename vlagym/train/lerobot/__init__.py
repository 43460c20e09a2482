"""LeRobot dataset v3.0, both ways: `export` writes a vlagym demo file as a LeRobot folder, `read` converts a
LeRobot folder into a (cached) vlagym demo file that every demo reader takes. `format` holds the layout's names
and the two configs; it imports nothing heavy, so the CLI can build options from it. See docs/lerobot.md.
"""
