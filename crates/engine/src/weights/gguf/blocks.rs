//! ggml's tensor types: their block layouts, dequantization to float32, and
//! the exact re-packing of the legacy 4/8-bit blocks (Q4_0, Q4_1, Q8_0) as
//! MLX affine quantization (group 32), which is what MLX's own loader does;
//! and MXFP4 (gpt-oss's experts), re-packed exactly as MLX's `mxfp4` mode.
//!
//! The block layouts follow ggml's `ggml-quants.c` (values along the last
//! axis, in blocks of 32 or, for the K-quants, super-blocks of 256).
use half::{bf16, f16};

/// A ggml tensor type, by its GGUF code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GgmlType {
    F32,
    F16,
    BF16,
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q8_0,
    Q8_1,
    Q2K,
    Q3K,
    Q4K,
    Q5K,
    Q6K,
    Q8K,
    Iq4Nl,
    Iq4Xs,
    /// OCP microscaling FP4: per 32 values an E8M0 scale and 16 bytes of E2M1 codes.
    Mxfp4,
    I8,
    I16,
    I32,
    F64,
}

impl GgmlType {
    pub fn from_code(code: u32) -> Option<Self> {
        use GgmlType::*;
        Some(match code {
            0 => F32,
            1 => F16,
            2 => Q4_0,
            3 => Q4_1,
            6 => Q5_0,
            7 => Q5_1,
            8 => Q8_0,
            9 => Q8_1,
            10 => Q2K,
            11 => Q3K,
            12 => Q4K,
            13 => Q5K,
            14 => Q6K,
            15 => Q8K,
            20 => Iq4Nl,
            23 => Iq4Xs,
            24 => I8,
            25 => I16,
            26 => I32,
            28 => F64,
            30 => BF16,
            39 => Mxfp4,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        use GgmlType::*;
        match self {
            F32 => "F32",
            F16 => "F16",
            BF16 => "BF16",
            Q4_0 => "Q4_0",
            Q4_1 => "Q4_1",
            Q5_0 => "Q5_0",
            Q5_1 => "Q5_1",
            Q8_0 => "Q8_0",
            Q8_1 => "Q8_1",
            Q2K => "Q2_K",
            Q3K => "Q3_K",
            Q4K => "Q4_K",
            Q5K => "Q5_K",
            Q6K => "Q6_K",
            Q8K => "Q8_K",
            Iq4Nl => "IQ4_NL",
            Iq4Xs => "IQ4_XS",
            Mxfp4 => "MXFP4",
            I8 => "I8",
            I16 => "I16",
            I32 => "I32",
            F64 => "F64",
        }
    }

    /// Values per block, and bytes per block.
    fn block(self) -> (usize, usize) {
        use GgmlType::*;
        match self {
            F32 | I32 => (1, 4),
            F16 | BF16 | I16 => (1, 2),
            I8 => (1, 1),
            F64 => (1, 8),
            Q4_0 | Iq4Nl => (32, 18),
            Q4_1 => (32, 20),
            Q5_0 => (32, 22),
            Q5_1 => (32, 24),
            Q8_0 => (32, 34),
            Q8_1 => (32, 36),
            Q2K => (256, 84),
            Q3K => (256, 110),
            Q4K => (256, 144),
            Q5K => (256, 176),
            Q6K => (256, 210),
            Q8K => (256, 292),
            Iq4Xs => (256, 136),
            Mxfp4 => (32, 17),
        }
    }

    pub fn block_values(self) -> usize {
        self.block().0
    }

    /// Bytes `elements` values take; `None` when they are not whole blocks.
    pub fn byte_len(self, elements: usize) -> Option<usize> {
        let (values, bytes) = self.block();
        elements.is_multiple_of(values).then(|| elements / values * bytes)
    }

    /// Bits per value as the type is named (Q4_K: 4), scales aside.
    pub fn nominal_bits(self) -> f64 {
        use GgmlType::*;
        match self {
            F64 => 64.0,
            F32 | I32 => 32.0,
            F16 | BF16 | I16 => 16.0,
            Q8_0 | Q8_1 | Q8K | I8 => 8.0,
            Q6K => 6.0,
            Q5_0 | Q5_1 | Q5K => 5.0,
            Q4_0 | Q4_1 | Q4K | Iq4Nl | Iq4Xs | Mxfp4 => 4.0,
            Q3K => 3.0,
            Q2K => 2.0,
        }
    }

    /// Whether [`dequantize`] reads this type.
    pub fn dequantizable(self) -> bool {
        use GgmlType::*;
        matches!(
            self,
            F32 | F16 | BF16 | Q4_0 | Q4_1 | Q5_0 | Q5_1 | Q8_0 | Q4K | Q5K | Q6K | Mxfp4
        )
    }

    /// Whether [`to_mlx_affine`] maps this type exactly onto MLX's affine
    /// quantization: bits, with group 32.
    pub fn mlx_affine_bits(self) -> Option<i32> {
        match self {
            GgmlType::Q4_0 | GgmlType::Q4_1 => Some(4),
            GgmlType::Q8_0 => Some(8),
            _ => None,
        }
    }
}

fn f16_at(b: &[u8], at: usize) -> f32 {
    f16::from_le_bytes([b[at], b[at + 1]]).to_f32()
}

/// Float32 values of `data` (whole blocks of `kind`); `None` for a type
/// [`GgmlType::dequantizable`] says no to.
pub fn dequantize(kind: GgmlType, data: &[u8]) -> Option<Vec<f32>> {
    let (values, bytes) = kind.block();
    let mut out = vec![0f32; data.len() / bytes * values];
    let blocks = data.chunks_exact(bytes).zip(out.chunks_exact_mut(values));
    match kind {
        GgmlType::F32 => {
            blocks.for_each(|(b, y)| y[0] = f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        }
        GgmlType::F16 => blocks.for_each(|(b, y)| y[0] = f16_at(b, 0)),
        GgmlType::BF16 => {
            blocks.for_each(|(b, y)| y[0] = bf16::from_le_bytes([b[0], b[1]]).to_f32())
        }
        GgmlType::Q4_0 => blocks.for_each(|(b, y)| q4_0(b, y)),
        GgmlType::Q4_1 => blocks.for_each(|(b, y)| q4_1(b, y)),
        GgmlType::Q5_0 => blocks.for_each(|(b, y)| q5(b, y, false)),
        GgmlType::Q5_1 => blocks.for_each(|(b, y)| q5(b, y, true)),
        GgmlType::Q8_0 => blocks.for_each(|(b, y)| q8_0(b, y)),
        GgmlType::Q4K => blocks.for_each(|(b, y)| q4_k(b, y)),
        GgmlType::Q5K => blocks.for_each(|(b, y)| q5_k(b, y)),
        GgmlType::Q6K => blocks.for_each(|(b, y)| q6_k(b, y)),
        GgmlType::Mxfp4 => blocks.for_each(|(b, y)| mxfp4(b, y)),
        _ => return None,
    }
    Some(out)
}

/// d (f16), then 16 bytes: value j is the low nibble of byte j, value j + 16
/// its high nibble; w = d · (q − 8).
fn q4_0(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 0);
    for (j, &q) in b[2..18].iter().enumerate() {
        y[j] = d * ((q & 0xF) as f32 - 8.0);
        y[j + 16] = d * ((q >> 4) as f32 - 8.0);
    }
}

/// d, m (f16), then nibbles as Q4_0; w = d · q + m.
fn q4_1(b: &[u8], y: &mut [f32]) {
    let (d, m) = (f16_at(b, 0), f16_at(b, 2));
    for (j, &q) in b[4..20].iter().enumerate() {
        y[j] = d * (q & 0xF) as f32 + m;
        y[j + 16] = d * (q >> 4) as f32 + m;
    }
}

/// d (and m for Q5_1), 32 high bits, then nibbles as Q4_0; the fifth bit of
/// value j is bit j of the high bits. Q5_0: w = d · (q − 16); Q5_1: w = d · q + m.
fn q5(b: &[u8], y: &mut [f32], with_min: bool) {
    let d = f16_at(b, 0);
    let (m, at) = if with_min { (f16_at(b, 2), 4) } else { (0.0, 2) };
    let qh = u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
    let offset = if with_min { 0.0 } else { 16.0 };
    for (j, &q) in b[at + 4..at + 20].iter().enumerate() {
        let lo = (q & 0xF) as u32 | ((qh >> j) & 1) << 4;
        let hi = (q >> 4) as u32 | ((qh >> (j + 16)) & 1) << 4;
        y[j] = d * (lo as f32 - offset) + m;
        y[j + 16] = d * (hi as f32 - offset) + m;
    }
}

/// d (f16), then 32 signed bytes; w = d · q.
fn q8_0(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 0);
    for (j, &q) in b[2..34].iter().enumerate() {
        y[j] = d * (q as i8) as f32;
    }
}

/// The 6-bit scale and min of sub-block `j` (of 8) of a Q4_K / Q5_K block,
/// packed into 12 bytes.
fn scale_min_k4(j: usize, s: &[u8]) -> (f32, f32) {
    let (sc, m) = if j < 4 {
        (s[j] & 63, s[j + 4] & 63)
    } else {
        ((s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4), (s[j + 4] >> 4) | ((s[j] >> 6) << 4))
    };
    (sc as f32, m as f32)
}

/// d, dmin (f16), 12 bytes of 6-bit scales/mins, 128 bytes of nibbles: 8
/// sub-blocks of 32; each 32 bytes hold two sub-blocks (low nibbles, then
/// high); w = d · scale · q − dmin · min.
fn q4_k(b: &[u8], y: &mut [f32]) {
    let (d, dmin) = (f16_at(b, 0), f16_at(b, 2));
    let scales = &b[4..16];
    let qs = &b[16..144];
    for (i, chunk) in qs.chunks_exact(32).enumerate() {
        let (s1, m1) = scale_min_k4(2 * i, scales);
        let (s2, m2) = scale_min_k4(2 * i + 1, scales);
        for (l, &q) in chunk.iter().enumerate() {
            y[64 * i + l] = d * s1 * (q & 0xF) as f32 - dmin * m1;
            y[64 * i + 32 + l] = d * s2 * (q >> 4) as f32 - dmin * m2;
        }
    }
}

/// Q4_K plus a fifth bit per value from 32 high-bit bytes (bit 2i of byte l
/// for the low sub-block i, bit 2i + 1 for the high one).
fn q5_k(b: &[u8], y: &mut [f32]) {
    let (d, dmin) = (f16_at(b, 0), f16_at(b, 2));
    let scales = &b[4..16];
    let qh = &b[16..48];
    let qs = &b[48..176];
    for (i, chunk) in qs.chunks_exact(32).enumerate() {
        let (s1, m1) = scale_min_k4(2 * i, scales);
        let (s2, m2) = scale_min_k4(2 * i + 1, scales);
        for (l, &q) in chunk.iter().enumerate() {
            let h1 = ((qh[l] >> (2 * i)) & 1) << 4;
            let h2 = ((qh[l] >> (2 * i + 1)) & 1) << 4;
            y[64 * i + l] = d * s1 * ((q & 0xF) | h1) as f32 - dmin * m1;
            y[64 * i + 32 + l] = d * s2 * ((q >> 4) | h2) as f32 - dmin * m2;
        }
    }
}

/// 128 bytes of low nibbles, 64 bytes of 2-bit highs, 16 signed scales, d
/// (f16): two halves of 128 values; w = d · scale · (q − 32), q 6-bit.
fn q6_k(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 208);
    for half in 0..2 {
        let ql = &b[64 * half..64 * half + 64];
        let qh = &b[128 + 32 * half..128 + 32 * half + 32];
        let sc = &b[192 + 8 * half..192 + 8 * half + 8];
        let y = &mut y[128 * half..128 * half + 128];
        for l in 0..32 {
            let is = l / 16;
            let q1 = ((ql[l] & 0xF) | ((qh[l] & 3) << 4)) as i32 - 32;
            let q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) as i32 - 32;
            let q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i32 - 32;
            let q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i32 - 32;
            let s = |k: usize| (sc[is + k] as i8) as f32;
            y[l] = d * s(0) * q1 as f32;
            y[l + 32] = d * s(2) * q2 as f32;
            y[l + 64] = d * s(4) * q3 as f32;
            y[l + 96] = d * s(6) * q4 as f32;
        }
    }
}

/// E2M1's sixteen codes: bit 3 the sign, then 0, ½, 1, 1½, 2, 3, 4, 6.
const E2M1: [f32; 16] =
    [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0];

/// 2^(e − 127), E8M0's value (255, its NaN, aside).
fn e8m0(e: u8) -> f32 {
    f32::from_bits(if e == 0 { 0x0040_0000 } else { (e as u32) << 23 })
}

/// The code of value `k` (0..32) of an MXFP4 block's 16 bytes: value j is
/// the low nibble of byte j, value j + 16 its high nibble (as Q4_0).
fn mxfp4_code(qs: &[u8], k: usize) -> u8 {
    if k < 16 {
        qs[k] & 0xF
    } else {
        qs[k - 16] >> 4
    }
}

/// The E8M0 exponent e, then 16 bytes of codes; w = 2^(e − 127) · E2M1(q).
fn mxfp4(b: &[u8], y: &mut [f32]) {
    let d = e8m0(b[0]);
    for (k, v) in y.iter_mut().enumerate() {
        *v = d * E2M1[mxfp4_code(&b[1..17], k) as usize];
    }
}

/// MXFP4 blocks as MLX's `mxfp4` mode holds them: the same E2M1 codes and
/// E8M0 exponents, the codes packed in value order (value `k` of a row at
/// bits `4k` of its little-endian uint32 words — the byte layout of OpenAI's
/// `*_blocks`), one uint8 exponent per group of 32.
pub fn mxfp4_to_mlx(data: &[u8]) -> (Vec<u32>, Vec<u8>) {
    let blocks = data.len() / 17;
    let mut packed_bytes = Vec::with_capacity(blocks * 16);
    let mut scales = Vec::with_capacity(blocks);
    for b in data.chunks_exact(17) {
        scales.push(b[0]);
        let qs = &b[1..17];
        for pair in 0..16 {
            packed_bytes.push(mxfp4_code(qs, 2 * pair) | (mxfp4_code(qs, 2 * pair + 1) << 4));
        }
    }
    let packed = packed_bytes
        .chunks_exact(4)
        .map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]))
        .collect();
    (packed, scales)
}

/// MLX affine quantization of a legacy block type, exactly: packed values
/// (little-endian in uint32 words, value `k` of a row at bits `bits · k`),
/// and one f16 scale and bias per group of 32, such that
/// `w = scale · q + bias`.
pub struct MlxAffine {
    pub packed: Vec<u32>,
    pub scales: Vec<f16>,
    pub biases: Vec<f16>,
    pub bits: i32,
}

/// Re-packs Q4_0, Q4_1 or Q8_0 `data` as MLX affine quantization.
pub fn to_mlx_affine(kind: GgmlType, data: &[u8]) -> Option<MlxAffine> {
    let bits = kind.mlx_affine_bits()?;
    let (_, bytes) = kind.block();
    let blocks = data.len() / bytes;
    let mut packed_bytes = Vec::with_capacity(blocks * 32 * bits as usize / 8);
    let mut scales = Vec::with_capacity(blocks);
    let mut biases = Vec::with_capacity(blocks);
    for b in data.chunks_exact(bytes) {
        let d = f16::from_le_bytes([b[0], b[1]]);
        match kind {
            GgmlType::Q4_0 | GgmlType::Q4_1 => {
                let (bias, qs) = match kind {
                    GgmlType::Q4_0 => (f16::from_f32(-8.0 * d.to_f32()), &b[2..18]),
                    _ => (f16::from_le_bytes([b[2], b[3]]), &b[4..20]),
                };
                scales.push(d);
                biases.push(bias);
                // Values in order: the 16 low nibbles, then the 16 high ones.
                let value = |k: usize| if k < 16 { qs[k] & 0xF } else { qs[k - 16] >> 4 };
                for pair in 0..16 {
                    packed_bytes.push(value(2 * pair) | (value(2 * pair + 1) << 4));
                }
            }
            _ => {
                scales.push(d);
                biases.push(f16::from_f32(-128.0 * d.to_f32()));
                packed_bytes.extend(b[2..34].iter().map(|&q| (q as i8 as i16 + 128) as u8));
            }
        }
    }
    let packed = packed_bytes
        .chunks_exact(4)
        .map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]))
        .collect();
    Some(MlxAffine { packed, scales, biases, bits })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f16_bytes(x: f32) -> [u8; 2] {
        f16::from_f32(x).to_le_bytes()
    }

    /// A Q4_0 block with d = 0.5 and values q = k mod 16: dequantization and
    /// the MLX re-packing describe the same weights.
    #[test]
    fn q4_0_dequantizes_and_repacks_to_the_same_values() {
        let mut block = f16_bytes(0.5).to_vec();
        for j in 0..16u8 {
            // value j = j (low nibble), value j + 16 = 15 - j (high nibble)
            block.push(j | ((15 - j) << 4));
        }
        let y = dequantize(GgmlType::Q4_0, &block).unwrap();
        for j in 0..16 {
            assert_eq!(y[j], 0.5 * (j as f32 - 8.0));
            assert_eq!(y[j + 16], 0.5 * ((15 - j) as f32 - 8.0));
        }
        let a = to_mlx_affine(GgmlType::Q4_0, &block).unwrap();
        assert_eq!((a.packed.len(), a.scales.len(), a.bits), (4, 1, 4));
        for (k, want) in y.iter().enumerate() {
            let q = (a.packed[k / 8] >> (4 * (k % 8))) & 0xF;
            assert_eq!(a.scales[0].to_f32() * q as f32 + a.biases[0].to_f32(), *want, "value {k}");
        }
    }

    #[test]
    fn q8_0_repacks_signed_bytes_as_unsigned_with_a_bias() {
        let mut block = f16_bytes(0.25).to_vec();
        block.extend((0..32).map(|k| (k as i8 - 16) as u8));
        let y = dequantize(GgmlType::Q8_0, &block).unwrap();
        let a = to_mlx_affine(GgmlType::Q8_0, &block).unwrap();
        for (k, want) in y.iter().enumerate() {
            let q = (a.packed[k / 4] >> (8 * (k % 4))) & 0xFF;
            assert_eq!(a.scales[0].to_f32() * q as f32 + a.biases[0].to_f32(), *want);
            assert_eq!(*want, 0.25 * (k as f32 - 16.0));
        }
    }

    /// One MXFP4 block with exponent 2^-1 and codes q(k) = k mod 16: the
    /// values, and the MLX re-packing's codes in value order.
    #[test]
    fn mxfp4_dequantizes_and_repacks_in_value_order() {
        let mut block = vec![126u8];
        // value j = j (low nibble), value j + 16 = 15 - j (high nibble)
        block.extend((0..16u8).map(|j| j | ((15 - j) << 4)));
        let y = dequantize(GgmlType::Mxfp4, &block).unwrap();
        assert_eq!(y.len(), 32);
        assert_eq!((y[3], y[7], y[15], y[16], y[31]), (0.75, 3.0, -3.0, -3.0, 0.0));
        let (packed, scales) = mxfp4_to_mlx(&block);
        assert_eq!((packed.len(), scales.as_slice()), (4, &[126u8][..]));
        for (k, want) in y.iter().enumerate() {
            let q = (packed[k / 8] >> (4 * (k % 8))) & 0xF;
            assert_eq!(0.5 * E2M1[q as usize], *want, "value {k}");
        }
        assert_eq!(e8m0(0), 2f32.powi(-127));
        assert_eq!(GgmlType::from_code(39), Some(GgmlType::Mxfp4));
        assert_eq!(GgmlType::Mxfp4.byte_len(64), Some(34));
    }

    #[test]
    fn sizes_are_whole_blocks() {
        assert_eq!(GgmlType::Q4K.byte_len(512), Some(288));
        assert_eq!(GgmlType::Q4K.byte_len(100), None);
        assert_eq!(GgmlType::F16.byte_len(3), Some(6));
        assert!(!GgmlType::Q3K.dequantizable());
    }
}
