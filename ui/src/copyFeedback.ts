// Copy buttons say what happened: "Copied" for a moment, or "Copy failed"
// (a clipboard the web view may not write). Without it a click on Copy
// looked like nothing happened.

/** How long "Copied" shows before the button says "Copy" again. */
export const COPIED_MS = 1200;

/** Copies `text`, then shows the outcome on `button` (its label comes back after a moment). */
export async function copyWithFeedback(button: HTMLElement, text: string): Promise<boolean> {
  const label = button.dataset.label ?? button.textContent ?? 'Copy';
  button.dataset.label = label;
  let ok = false;
  try {
    if (!navigator.clipboard) throw new Error('no clipboard');
    await navigator.clipboard.writeText(text);
    ok = true;
  } catch { /* said on the button */ }
  button.textContent = ok ? 'Copied' : 'Copy failed';
  window.setTimeout(() => { button.textContent = label; }, COPIED_MS);
  return ok;
}
