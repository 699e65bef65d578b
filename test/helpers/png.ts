/**
 * Reads an 8-bit, non-interlaced RGB or RGBA PNG (what Chromium's --screenshot writes)
 * into RGBA pixels, so that tests can look at what a page showed.
 */
import { inflateSync } from "node:zlib";

export interface Image {
  width: number;
  height: number;
  /** RGBA, row by row. */
  pixels: Buffer;
}

export function decodePng(png: Buffer): Image {
  if (!png.subarray(0, 8).equals(Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]))) throw new Error("not a PNG");
  let offset = 8;
  let width = 0,
    height = 0,
    colorType = 0;
  const idat: Buffer[] = [];
  while (offset < png.length) {
    const length = png.readUInt32BE(offset);
    const type = png.toString("latin1", offset + 4, offset + 8);
    const data = png.subarray(offset + 8, offset + 8 + length);
    if (type === "IHDR") {
      width = data.readUInt32BE(0);
      height = data.readUInt32BE(4);
      const depth = data[8]!;
      colorType = data[9]!;
      if (depth !== 8 || (colorType !== 2 && colorType !== 6) || data[12] !== 0)
        throw new Error(`unsupported PNG: depth ${depth}, color type ${colorType}, interlace ${data[12]}`);
    } else if (type === "IDAT") idat.push(data);
    else if (type === "IEND") break;
    offset += 12 + length;
  }
  const channels = colorType === 6 ? 4 : 3;
  const raw = inflateSync(Buffer.concat(idat));
  const stride = width * channels;
  const out = Buffer.alloc(width * height * 4);
  let prev = Buffer.alloc(stride);
  for (let y = 0; y < height; y++) {
    const filter = raw[y * (stride + 1)]!;
    const line = Buffer.from(raw.subarray(y * (stride + 1) + 1, (y + 1) * (stride + 1)));
    for (let i = 0; i < stride; i++) {
      const a = i >= channels ? line[i - channels]! : 0;
      const b = prev[i]!;
      const c = i >= channels ? prev[i - channels]! : 0;
      let add = 0;
      if (filter === 1) add = a;
      else if (filter === 2) add = b;
      else if (filter === 3) add = (a + b) >> 1;
      else if (filter === 4) {
        const p = a + b - c;
        const pa = Math.abs(p - a),
          pb = Math.abs(p - b),
          pc = Math.abs(p - c);
        add = pa <= pb && pa <= pc ? a : pb <= pc ? b : c;
      }
      line[i] = (line[i]! + add) & 0xff;
    }
    for (let x = 0; x < width; x++) {
      line.copy(out, (y * width + x) * 4, x * channels, x * channels + 3);
      out[(y * width + x) * 4 + 3] = channels === 4 ? line[x * channels + 3]! : 255;
    }
    prev = line;
  }
  return { width, height, pixels: out };
}

/** How many pixels are within `tolerance` of a colour given as #rrggbb. */
export function countColor(image: Image, hex: string, tolerance = 8): number {
  const [r, g, b] = [1, 3, 5].map((i) => parseInt(hex.slice(i, i + 2), 16));
  let n = 0;
  for (let i = 0; i < image.pixels.length; i += 4) {
    if (Math.abs(image.pixels[i]! - r!) <= tolerance && Math.abs(image.pixels[i + 1]! - g!) <= tolerance && Math.abs(image.pixels[i + 2]! - b!) <= tolerance)
      n++;
  }
  return n;
}
