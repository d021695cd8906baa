"""The convolution kernel's input gather, a fixed Triton helper that kernel.py carries (copied by
name, bot.codegen.fixed). Imported and linted by the tests."""
import triton
import triton.language as tl


@triton.jit
def _gather(x_ptr, ks, n, od, oh, ow, row_ok, ci0, C_in, D, H, W, CIN_G: tl.constexpr, COUT_G: tl.constexpr,
            KD: tl.constexpr, KH: tl.constexpr, KW: tl.constexpr, SD: tl.constexpr, SH: tl.constexpr,
            SW: tl.constexpr, PD: tl.constexpr, PH: tl.constexpr, PW: tl.constexpr, DD: tl.constexpr,
            DH: tl.constexpr, DW: tl.constexpr, TRANSPOSED: tl.constexpr):
    # The input tile of one K step: for each output position (n, od, oh, ow) and each k = (input
    # channel of the group, kd, kh, kw), the value that tap multiplies, zero outside x; and each k's
    # offset in the weight. A convolution reads x at position * stride - padding + tap * dilation;
    # a transposed one reads input i where i * stride - padding + tap * dilation is the position.
    TAPS = KD * KH * KW
    k_ok = ks < CIN_G * TAPS
    c = ks // TAPS
    tap = ks % TAPS
    kd = tap // (KH * KW)
    kh = (tap // KW) % KH
    kw = tap % KW
    if TRANSPOSED:
        td = od[:, None] + PD - (kd * DD)[None, :]
        th = oh[:, None] + PH - (kh * DH)[None, :]
        tw = ow[:, None] + PW - (kw * DW)[None, :]
        ok = (td >= 0) & (th >= 0) & (tw >= 0) & (td % SD == 0) & (th % SH == 0) & (tw % SW == 0)
        i_d = td // SD
        i_h = th // SH
        i_w = tw // SW
        # weight [C_in, C_out / groups, KD, KH, KW]: input channel ci0 + c, then the tap
        w_offs = (ci0 + c) * (COUT_G * TAPS) + tap
    else:
        i_d = (od * SD - PD)[:, None] + (kd * DD)[None, :]
        i_h = (oh * SH - PH)[:, None] + (kh * DH)[None, :]
        i_w = (ow * SW - PW)[:, None] + (kw * DW)[None, :]
        ok = (i_d >= 0) & (i_h >= 0) & (i_w >= 0)
        # weight [C_out, C_in / groups, KD, KH, KW]: k is the offset within an output channel's row
        w_offs = ks
    ok = ok & (i_d < D) & (i_h < H) & (i_w < W) & row_ok[:, None] & k_ok[None, :]
    x_offs = ((n.to(tl.int64)[:, None] * C_in + (ci0 + c)[None, :]) * D + i_d) * (H * W) + i_h * W + i_w
    a = tl.load(x_ptr + x_offs, mask=ok, other=0.0)
    return a, w_offs, k_ok


@triton.jit
def _tap_rows(od, oh, ow, row_ok, kd, kh, kw, C_in, D, H, W, SD: tl.constexpr, SH: tl.constexpr, SW: tl.constexpr,
              PD: tl.constexpr, PH: tl.constexpr, PW: tl.constexpr, DD: tl.constexpr, DH: tl.constexpr,
              DW: tl.constexpr, TRANSPOSED: tl.constexpr, CHANNELS_LAST: tl.constexpr, WIDE: tl.constexpr):
    # For one tap (kd, kh, kw) of the kernel: the offset, inside its sample's group of channels, of the
    # input x[i_d, i_h, i_w] each output position reads (channels D * H * W apart, or next to each
    # other in x channels-last [N, D, H, W, C_in]), and whether that input exists (inside x; for a
    # transposed convolution, where the stride lands). int32 unless a sample spans 2**31 elements
    # (WIDE): the loop's address arithmetic is the cheaper for it.
    if TRANSPOSED:
        td = od + PD - kd * DD
        th = oh + PH - kh * DH
        tw = ow + PW - kw * DW
        ok = (td >= 0) & (th >= 0) & (tw >= 0) & (td % SD == 0) & (th % SH == 0) & (tw % SW == 0)
        i_d = td // SD
        i_h = th // SH
        i_w = tw // SW
    else:
        i_d = od * SD - PD + kd * DD
        i_h = oh * SH - PH + kh * DH
        i_w = ow * SW - PW + kw * DW
        ok = (i_d >= 0) & (i_h >= 0) & (i_w >= 0)
    ok = ok & (i_d < D) & (i_h < H) & (i_w < W) & row_ok
    if WIDE:
        i_d = i_d.to(tl.int64)
    offs = (i_d * H + i_h) * W + i_w
    if CHANNELS_LAST:
        offs = offs * C_in
    return offs, ok


@triton.jit
def _channels_last(x_ptr, out_ptr, C, S, BLOCK_C: tl.constexpr, BLOCK_S: tl.constexpr):
    # x [N, C, S] -> out [N, S, C], a BLOCK_C x BLOCK_S tile a program (axis 0: the samples' position
    # blocks, which no batch size overflows): the compiler takes the tile through shared memory, so
    # the loads and the stores are both contiguous.
    blocks = tl.cdiv(S, BLOCK_S)
    n = (tl.program_id(0) // blocks).to(tl.int64)
    c = (tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)).to(tl.int64)
    s = ((tl.program_id(0) % blocks) * BLOCK_S + tl.arange(0, BLOCK_S)).to(tl.int64)
    mask = (c < C)[:, None] & (s < S)[None, :]
    v = tl.load(x_ptr + n * C * S + c[:, None] * S + s[None, :], mask=mask)
    tl.store(out_ptr + n * C * S + s[None, :] * C + c[:, None], v, mask=mask)


@triton.jit
def _taps_first(w_ptr, out_ptr, C_OUT, CIN_G, TAPS: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_K: tl.constexpr):
    # The weight [C_out, CIN_G * TAPS] (k = channel * TAPS + tap) -> out [TAPS, CIN_G, C_out]: a K step's
    # BLOCK_K channels of one tap then hold their output channels contiguous.
    r = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    k = tl.program_id(1) * BLOCK_K + tl.arange(0, BLOCK_K)
    mask = (r < C_OUT)[:, None] & (k < CIN_G * TAPS)[None, :]
    v = tl.load(w_ptr + r[:, None] * (CIN_G * TAPS) + k[None, :], mask=mask)
    tl.store(out_ptr + ((k % TAPS) * CIN_G + k // TAPS)[None, :] * C_OUT + r[:, None], v, mask=mask)
