import { describe, expect, it } from 'vitest';
import { shortcutFor, shortcutLabel } from './shortcuts';

const press = (key: string, mods: { ctrl?: boolean; meta?: boolean; shift?: boolean; alt?: boolean } = {}) => ({
  key, ctrlKey: !!mods.ctrl, metaKey: !!mods.meta, shiftKey: !!mods.shift, altKey: !!mods.alt,
});

describe('keyboard shortcuts', () => {
  it('are the menu bar’s ⌘ shortcuts with Ctrl on Linux', () => {
    expect(shortcutFor(press('n', { ctrl: true }), false)).toBe('new-chat');
    expect(shortcutFor(press(',', { ctrl: true }), false)).toBe('settings');
    expect(shortcutFor(press('k', { ctrl: true }), false)).toBe('search');
    expect(shortcutFor(press('f', { ctrl: true }), false)).toBe('search');
    expect(shortcutFor(press('.', { ctrl: true }), false)).toBe('stop');
    expect(shortcutFor(press('r', { ctrl: true }), false)).toBe('regenerate');
    expect(shortcutFor(press('C', { ctrl: true, shift: true }), false)).toBe('copy-last');
    expect(shortcutFor(press('S', { ctrl: true, shift: true }), false)).toBe('toggle-sidebar');
    expect(shortcutFor(press('Escape'), false)).toBe('stop');
    // ⌘ on a Linux keyboard (Super) is not the modifier, nor is Ctrl on a Mac
    expect(shortcutFor(press('n', { meta: true }), false)).toBeNull();
    expect(shortcutFor(press('n', { ctrl: true }), true)).toBeNull();
    expect(shortcutFor(press('n', { meta: true }), true)).toBe('new-chat');
    // plain typing and other chords are left alone
    expect(shortcutFor(press('n'), false)).toBeNull();
    expect(shortcutFor(press('v', { ctrl: true }), false)).toBeNull();
    expect(shortcutFor(press('n', { ctrl: true, alt: true }), false)).toBeNull();
  });

  it('are labelled for the platform', () => {
    expect(shortcutLabel('new-chat', false)).toBe('Ctrl+N');
    expect(shortcutLabel('new-chat', true)).toBe('⌘N');
    expect(shortcutLabel('toggle-sidebar', false)).toBe('Ctrl+Shift+S');
  });
});
