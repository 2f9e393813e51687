// What the native menu bar asks for. Its app items (src-tauri/src/menu.rs)
// send their id as the payload of a `menu-action` event; the page runs it
// through App.run, the same code the buttons and keyboard shortcuts run.
// The Rust side checks that this list holds every id it sends.
import type { ShortcutAction } from './shortcuts';

/** Menu actions: the keyboard shortcuts' actions, and two that only the menu and the sidebar offer. */
export type MenuAction = ShortcutAction | 'import-chat' | 'export-chat';

export const MENU_ACTIONS: readonly MenuAction[] = [
  'new-chat',
  'import-chat',
  'export-chat',
  'settings',
  'search',
  'stop',
  'regenerate',
  'copy-last',
  'toggle-sidebar',
];

/** The action a menu event names, or null for anything else (an event's payload is not trusted to be one). */
export function menuAction(payload: unknown): MenuAction | null {
  return typeof payload === 'string' && (MENU_ACTIONS as readonly string[]).includes(payload) ? (payload as MenuAction) : null;
}
