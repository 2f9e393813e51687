# The window's frames as the X server receives them, for
# scripts/bench-app-vs-api.sh: every rectangle drawn on the screen (the X
# DAMAGE extension, reported on the root window, so every window's drawing
# counts), one line each, "<CLOCK_MONOTONIC ms> <x> <y> <width> <height>",
# appended to OUT until the process is stopped. The bench counts the frames
# the app drew between the click on Send and the first text of the answer:
# each one is painted by the web view and put on screen by the app's GTK
# thread on the CPU that the engine reads the prompt with.
# Usage: python window_frames.py OUT   (DISPLAY: the X server to watch)
import select
import sys
import time

from Xlib import display
from Xlib.ext import damage

screen = display.Display()
screen.damage_query_version()
root = screen.screen().root
root.damage_create(damage.DamageReportRawRectangles)
screen.sync()
with open(sys.argv[1], "a", buffering=1) as out:
    while True:
        if not screen.pending_events():
            select.select([screen.fileno()], [], [])
        while screen.pending_events():
            event = screen.next_event()
            if event.type == screen.extension_event.DamageNotify:
                now = time.clock_gettime(time.CLOCK_MONOTONIC) * 1000
                a = event.area
                out.write(f"{now:.3f} {a.x} {a.y} {a.width} {a.height}\n")
