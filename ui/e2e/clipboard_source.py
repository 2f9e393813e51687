"""Puts a picture on the X clipboard, as copying an image in another app
does, for the end-to-end paste test; it owns the clipboard until killed.
Usage: clipboard_source.py FILE   (prints "ready" once the clipboard holds it)"""
import sys

import gi

gi.require_version("Gtk", "3.0")
gi.require_version("Gdk", "3.0")
from gi.repository import Gdk, GdkPixbuf, GLib, Gtk  # noqa: E402

pixbuf = GdkPixbuf.Pixbuf.new_from_file(sys.argv[1])
clipboard = Gtk.Clipboard.get(Gdk.SELECTION_CLIPBOARD)
clipboard.set_image(pixbuf)
clipboard.store()


def announce():
    print("ready", flush=True)
    return False  # once


GLib.timeout_add(300, announce)
Gtk.main()
