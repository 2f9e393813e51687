"""A real GTK drag source for the end-to-end test: a small window whose
button drags a file as text/uri-list, so xdotool can perform an operating
system drag and drop (XDND) onto the app window.
Usage: drag_source.py FILE X Y
Prints "ready" once shown, "delivered" when the drop target asked for the
file (the drop reached the app), "failed" when the drag ended without a drop
(under load the pointer can outrun the drag), and "done" when it ends."""
import sys

import gi

gi.require_version("Gtk", "3.0")
gi.require_version("Gdk", "3.0")
from gi.repository import Gdk, Gio, GLib, Gtk  # noqa: E402

path, x, y = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
uri = Gio.File.new_for_path(path).get_uri()

win = Gtk.Window(title="e2e-drag-source")
win.set_default_size(200, 120)
win.move(x, y)
button = Gtk.Button(label="drag me")
button.drag_source_set(Gdk.ModifierType.BUTTON1_MASK, [], Gdk.DragAction.COPY)
button.drag_source_add_uri_targets()


def deliver(_widget, _context, data, _info, _time):
    data.set_uris([uri])
    print("delivered", flush=True)


def failed(_widget, _context, result):
    print(f"failed {result.value_nick}", flush=True)
    return False  # GTK's own end of a failed drag (the icon snaps back)


button.connect("drag-data-get", deliver)
button.connect("drag-failed", failed)
button.connect("drag-end", lambda *_: print("done", flush=True))
win.add(button)
win.connect("destroy", Gtk.main_quit)
win.show_all()


def announce():
    print("ready", flush=True)
    return False  # once


# shown and drawn before the pointer comes for it
win.connect("map-event", lambda *_: GLib.timeout_add(300, announce) and False)
Gtk.main()
