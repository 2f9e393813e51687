// A failed download or Hub search in plain words, chosen by the hub's
// stable error code (crates/hub/src/error.rs), never by the wording of its
// message (offline, that is a raw "dns error…" naming the URL twice).
import type { AppError } from './api';

export function downloadErrorText(error: AppError): string {
  switch (error.code) {
    case 'NETWORK_ERROR':
      return 'No connection to Hugging Face. Check that this computer is online, then retry; the download resumes where it stopped.';
    case 'NOT_FOUND':
      return 'This model is not on Hugging Face any more (not found).';
    case 'AUTH_REQUIRED':
      return 'This model is private or gated: it needs a Hugging Face token with access. Set one in Settings → Hugging Face.';
    case 'GATED':
      // the message names the model's page, where the terms are accepted
      return `This model is gated: accept its terms on its Hugging Face page with your account, and set a token of that account in Settings → Hugging Face. (${error.message})`;
    case 'DISK_FULL':
      return 'The disk is full. Free some space, then retry; what was downloaded is kept.';
    case 'CHECKSUM_MISMATCH':
      return 'A downloaded file was damaged on the way (checksum mismatch) and was deleted. Retry to fetch it again.';
    case 'HTTP_ERROR':
      return 'Hugging Face answered with an error. Try again in a while.';
    case 'ALREADY_DOWNLOADING':
      return 'This model is already downloading.';
    default:
      return `The download failed: ${error.message}`;
  }
}

/** A failed Hub search (anything a command rejected with) in plain words. */
export function searchErrorText(e: unknown): string {
  const error = e && typeof e === 'object' && 'code' in e ? (e as AppError) : null;
  switch (error?.code) {
    case 'NETWORK_ERROR':
      return 'No connection to Hugging Face. Check that this computer is online, then search again. Models already on this computer work offline.';
    case 'HTTP_ERROR':
      return 'Hugging Face answered with an error. Try again in a while.';
    case 'AUTH_REQUIRED':
      return 'Hugging Face refused the search: check the token in Settings → Hugging Face.';
    default:
      return `The search failed: ${error?.message ?? String(e)}`;
  }
}
