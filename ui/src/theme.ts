// Light or dark: the system's choice by default, or the one picked in
// Settings (kept in this window's local storage). The page's colours hang on
// <html data-theme>, so both ways use one set of CSS variables.
export type ThemeChoice = 'system' | 'light' | 'dark';

const KEY = 'vlm-theme';
const systemDark = () => window.matchMedia?.('(prefers-color-scheme: dark)').matches ?? false;

export function themeChoice(): ThemeChoice {
  const stored = localStorage.getItem(KEY);
  return stored === 'light' || stored === 'dark' ? stored : 'system';
}

export function applyTheme(choice: ThemeChoice = themeChoice()): void {
  if (choice === 'system') localStorage.removeItem(KEY);
  else localStorage.setItem(KEY, choice);
  const dark = choice === 'dark' || (choice === 'system' && systemDark());
  document.documentElement.dataset.theme = dark ? 'dark' : 'light';
}

/** Follows the system's appearance while the choice is "system". */
export function followSystemTheme(): void {
  window.matchMedia?.('(prefers-color-scheme: dark)').addEventListener('change', () => {
    if (themeChoice() === 'system') applyTheme('system');
  });
}
