// The app's keyboard shortcuts: the ones the menu bar shows with ⌘ work
// with Ctrl on Linux and Windows. The native menu (src-tauri/src/menu.rs)
// sends the same action names; pressed on the real keyboard, its shortcuts
// reach the menu first on Linux (GTK), the page first on a Mac (WebKit), so
// each runs once either way.
export type ShortcutAction =
  | 'new-chat'
  | 'settings'
  | 'search'
  | 'stop'
  | 'regenerate'
  | 'copy-last'
  | 'toggle-sidebar';

export interface KeyPress {
  key: string;
  ctrlKey: boolean;
  metaKey: boolean;
  shiftKey: boolean;
  altKey: boolean;
}

/** The shortcuts as the user reads them, e.g. for a help line or a tooltip. */
export function shortcutLabel(action: ShortcutAction, mac: boolean): string {
  const mod = mac ? '⌘' : 'Ctrl+';
  const shift = mac ? '⇧' : 'Shift+';
  switch (action) {
    case 'new-chat': return `${mod}N`;
    case 'settings': return `${mod},`;
    case 'search': return `${mod}K`;
    case 'stop': return `${mod}. or Esc`;
    case 'regenerate': return `${mod}R`;
    case 'copy-last': return `${mod}${shift}C`;
    case 'toggle-sidebar': return `${mod}${shift}S`;
  }
}

/** The action a key press asks for, or null. `mac`: ⌘ is the modifier
 * (Ctrl stays free for the text field's own keys there). */
export function shortcutFor(e: KeyPress, mac: boolean): ShortcutAction | null {
  if (e.key === 'Escape' && !e.ctrlKey && !e.metaKey && !e.altKey && !e.shiftKey) return 'stop';
  const mod = mac ? e.metaKey && !e.ctrlKey : e.ctrlKey && !e.metaKey;
  if (!mod || e.altKey) return null;
  const key = e.key.length === 1 ? e.key.toLowerCase() : e.key;
  if (e.shiftKey) {
    if (key === 'c') return 'copy-last';
    if (key === 's') return 'toggle-sidebar';
    return null;
  }
  switch (key) {
    case 'n': return 'new-chat';
    case ',': return 'settings';
    case 'k': case 'f': return 'search';
    case '.': return 'stop';
    case 'r': return 'regenerate';
    default: return null;
  }
}

/** Whether this runs on a Mac (for ⌘ against Ctrl and for words like "this Mac"). */
export function onMac(): boolean {
  return /Mac|iPhone|iPad/.test(navigator.userAgent);
}
