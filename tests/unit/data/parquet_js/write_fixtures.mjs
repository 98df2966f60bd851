// Writes the Parquet files of tests/unit/data/parquet_test.cc with hyparquet-writer (a
// JavaScript Parquet writer, not Apache Arrow's, so the reader is tested against another
// implementation). Installed by `npm ci` here (scripts/test.sh).
//
//   node write_fixtures.mjs OUT_DIR
//
// Row i of the table holds values that parquet_test.cc computes again (Expected*): keep the
// two in step.
import { gzipSync } from 'node:zlib'
import { parquetWriteFile } from 'hyparquet-writer'

const out = process.argv[2]
if (!out) throw new Error('usage: node write_fixtures.mjs OUT_DIR')
const rows = (begin, end, f) => Array.from({ length: end - begin }, (_, k) => f(begin + k))
const req = (name, type, extra = {}) => ({ name, type, repetition_type: 'REQUIRED', ...extra })
const opt = (name, type, extra = {}) => ({ name, type, repetition_type: 'OPTIONAL', ...extra })
// A 3-level Parquet LIST of `type` values.
const list = (name, element) => [
  { name, repetition_type: 'REQUIRED', converted_type: 'LIST', num_children: 1 },
  { name: 'list', repetition_type: 'REPEATED', num_children: 1 },
  { name: 'element', repetition_type: 'REQUIRED', ...element },
]
const write = (name, columns, schema, options = {}) =>
  parquetWriteFile({
    filename: `${out}/${name}`,
    columnData: columns.map(([n, data]) => ({ name: n, data })),
    schema: [{ name: 'root', num_children: columns.length }, ...schema],
    ...options,
  })

// The table, in two files: rows [0, 1000) in row groups of 128 (snappy), rows [1000, 1250) in
// row groups of 50, then 100 (gzip).
const tableColumns = (begin, end) => [
  ['id', rows(begin, end, (i) => BigInt(i))],
  ['i8', rows(begin, end, (i) => (i % 256) - 128)],
  ['i16', rows(begin, end, (i) => ((i * 37) % 65536) - 32768)],
  ['i32', rows(begin, end, (i) => i * 7919 - 5000000)],
  ['u8', rows(begin, end, (i) => (i * 7) % 256)],
  ['u16', rows(begin, end, (i) => (i * 131) % 65536)],
  ['u32', rows(begin, end, (i) => 4000000000 - i * 3)],
  ['f32', rows(begin, end, (i) => i * 0.25 - 100)],
  ['f64', rows(begin, end, (i) => i / 7)],
  ['flag', rows(begin, end, (i) => i % 3 === 0)],
  ['name', rows(begin, end, (i) => (i % 10 === 0 ? '' : `row-${i}` + (i % 7 === 0 ? '-é' : '')))],
  ['blob', rows(begin, end, (i) => Uint8Array.from({ length: i % 5 }, (_, k) => (i + k) % 256))],
  ['vec', rows(begin, end, (i) => [i, i + 0.5, -i])],
]
const tableSchema = [
  req('id', 'INT64'),
  req('i8', 'INT32', { converted_type: 'INT_8' }),
  req('i16', 'INT32', { converted_type: 'INT_16' }),
  req('i32', 'INT32'),
  req('u8', 'INT32', { converted_type: 'UINT_8' }),
  req('u16', 'INT32', { converted_type: 'UINT_16' }),
  req('u32', 'INT32', { converted_type: 'UINT_32' }),
  req('f32', 'FLOAT'),
  req('f64', 'DOUBLE'),
  opt('flag', 'BOOLEAN'),  // optional without nulls: reads like a required one
  req('name', 'BYTE_ARRAY', { converted_type: 'UTF8' }),
  req('blob', 'BYTE_ARRAY'),
  ...list('vec', { type: 'FLOAT' }),
]
write('table-0.parquet', tableColumns(0, 1000), tableSchema, { rowGroupSize: 128 })
write('table-1.parquet', tableColumns(1000, 1250), tableSchema, {
  rowGroupSize: [50, 100],
  codec: 'GZIP',
  compressors: { GZIP: (bytes) => new Uint8Array(gzipSync(bytes)) },
})

// Nulls: score is null in rows 5 and 17, name in row 11.
write('nulls.parquet', [
  ['id', rows(0, 20, (i) => BigInt(i))],
  ['score', rows(0, 20, (i) => (i === 5 || i === 17 ? null : i * 1.5))],
  ['name', rows(0, 20, (i) => (i === 11 ? null : `n${i}`))],
], [req('id', 'INT64'), opt('score', 'DOUBLE'), opt('name', 'BYTE_ARRAY', { converted_type: 'UTF8' })],
{ rowGroupSize: 8 })

// A shard whose i8 is a plain int32.
write('other.parquet', [
  ['id', rows(0, 10, (i) => BigInt(i))],
  ['i8', rows(0, 10, (i) => i)],
], [req('id', 'INT64'), req('i8', 'INT32')])

// Types rayd Data does not hold.
write('types.parquet', [
  ['id', rows(0, 4, (i) => BigInt(i))],
  ['ts', rows(0, 4, (i) => new Date(1700000000000 + i))],
  ['big', rows(0, 4, (i) => BigInt(i))],
  ['tags', rows(0, 4, (i) => ['a', 'b'].slice(0, i % 3))],
], [
  req('id', 'INT64'),
  req('ts', 'INT64', { converted_type: 'TIMESTAMP_MILLIS' }),
  req('big', 'INT64', { converted_type: 'UINT_64' }),
  ...list('tags', { type: 'BYTE_ARRAY', converted_type: 'UTF8' }),
])

// A list column whose row 4 is one value short.
write('ragged.parquet', [
  ['vec', rows(0, 8, (i) => (i === 4 ? [1, 2] : [i, i, i]))],
], [...list('vec', { type: 'FLOAT' })], { rowGroupSize: 3 })
