"""A real GTK drag source for the end-to-end test: a small window whose
button drags a file as text/uri-list, so xdotool can perform an operating
system drag and drop (XDND) onto the app window.
Usage: drag_source.py FILE X Y   (prints "ready" once shown, "done" after the drop)"""
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
button.connect("drag-data-get", lambda _w, _ctx, data, _info, _t: data.set_uris([uri]))
button.connect("drag-end", lambda *_: print("done", flush=True))
win.add(button)
win.connect("destroy", Gtk.main_quit)
win.show_all()


def announce():
    print("ready", flush=True)
    return False  # once


GLib.timeout_add(300, announce)
Gtk.main()
