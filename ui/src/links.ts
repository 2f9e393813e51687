// Links in replies open in the user's browser, never in the app's window:
// a click (or Enter, or a middle click) on a link is stopped here and the
// link handed to the app (`open_link`), which opens only http, https and
// mailto links and says why it refused any other. The page itself never
// navigates: model output is untrusted.

/** Stops every link activation under `root` and passes its href to `open`;
 * a refusal's message goes to `toast`. */
export function interceptLinks(root: Document | HTMLElement, open: (href: string) => Promise<void>, toast: (message: string) => void): void {
  const handle = (e: MouseEvent) => {
    const link = (e.target as Element | null)?.closest?.('a[href]');
    if (!link) return;
    e.preventDefault();
    // the middle button's auxclick, or a right click's: only the middle one opens
    if (e.type === 'auxclick' && e.button !== 1) return;
    // the href as written: a relative one must be refused, not resolved against the app
    const href = link.getAttribute('href') ?? '';
    open(href).catch((err: unknown) => toast(refusal(err)));
  };
  root.addEventListener('click', handle as EventListener);
  root.addEventListener('auxclick', handle as EventListener);
}

function refusal(err: unknown): string {
  if (err && typeof err === 'object' && 'message' in err) return String((err as { message: unknown }).message);
  return `The link could not be opened: ${String(err)}`;
}
