/* mcc.bus._native: the bus's native boundary over Cyclone DDS.
 *
 * Written by hand because it is the product's hot path and the reason it exists is what
 * cyclonedds-python's C layer does not do: every call that can block inside Cyclone (a write
 * that waits on flow control, a take that contends with the receive thread for the reader's
 * lock) runs with the GIL released, so no Python thread can stall Cyclone's threads and no
 * Cyclone thread needs the GIL but to call an inline handler (set_on_data). Samples cross as
 * serialized CDR (encapsulation header included), in batches (bulk transfers excepted);
 * entities are the integer handles cyclonedds-python created, in the one Cyclone library of
 * the process (this module links the same libddsc).
 *
 * Functions (retcodes are Cyclone's: 0 or a negative DDS_RETCODE_*):
 *   write(writer, data, timestamp_ns=-1, dispose=False) -> retcode
 *   write_many(writer, samples) -> (written, retcode)
 *   flush(writer) -> retcode (send what write batching holds)
 *   after_fork() (registered with os.register_at_fork by mcc.bus.core)
 *   attach(waitset, entity), detach(waitset, entity) -> retcode
 *   wait(waitset, timeout_ns) -> list of the handles of the attached entities that triggered
 *   take(reader_or_condition, mask, max_samples) -> list[(bytes, SampleInfo)] | retcode
 *     (for a dispose/unregister notice, info.valid_data is False and the bytes hold the key)
 *   read(reader_or_condition, mask, max_samples) -> same as take, leaving samples in the cache
 *   take/read(..., layout): with a layout from flat_layout, samples with data only, each decoded
 *     here into an instance of the layout's class (its sample_info set), or left as the
 *     (bytes, SampleInfo) tuple where this decoder cannot or will not (see "Flat decoding")
 *   flat_layout(cls, appendable, kind2, fields) -> layout (a capsule)
 *   encode_flat(layout, sample, xcdr2) -> bytes | None, and
 *   write_flat(writer, layout, sample, xcdr2, dispose=False) -> retcode | None: a flat sample
 *     encoded here (None: not by this code, the Python encoder raises what is wrong)
 *   matched(entity, of_writer) -> list[endpoint] | retcode: the endpoints matched with a writer
 *     (of_writer true) or a reader, one consistent snapshot (see matched_snapshot); an endpoint
 *     is (handle, key, participant_key, partitions, topic_name, type_name, durability): keys are
 *     the 16 GUID bytes, partitions a tuple of str or None when its QoS sets none, durability
 *     Cyclone's dds_durability_kind_t (0 volatile … 3 persistent)
 *   matched_one(entity, of_writer, handle) -> endpoint | None
 *   library_features() -> dict of what this Cyclone build can do
 *   set_on_data(reader, callback | None) -> retcode: callback() on the thread that delivers
 *     the reader's data (Cyclone's receive thread), see native_set_on_data
 *   bulk_endpoint(parent, topic_name, qos_address, is_writer) -> entity | retcode, and
 *   send_bulk, receive_bulk, peek_bulk, matched_count, delete, shm_available: bulk transfers
 *     in BulkBlock samples of the C type idlc generates (loaned from iceoryx on `shm`), see
 *     "Bulk transfers" below
 *   LIBRARY: the path of the libddsc this module runs on, as the dynamic loader found it
 *     (cyclonedds-python must load the same file)
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <float.h>
#include <math.h>
#include <string.h>

#include "dds/dds.h"
#include "dds/version.h"
#include "dds/ddsi/ddsi_protocol.h"
#include "dds/ddsi/ddsi_serdata.h"
#include "dds/ddsi/ddsi_sertype.h"
#include "dds/ddsrt/random.h"
#include "mcc.h" /* generated from idl/mcc.idl by Cyclone's idlc (setup.py) */

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <time.h>
#include <stdlib.h>
#include <unistd.h>

#define MAX_BATCH 65536

#ifndef MCC_CYCLONE_LIB
#define MCC_CYCLONE_LIB "libddsc.so.11"
#endif

/* The file the loader mapped libddsc from (wherever the RUNPATH led: a build prefix, or the
 * cyclonedds wheel's bundle); MCC_CYCLONE_LIB only if the loader cannot say. */
static const char *cyclone_library(void)
{
  Dl_info info;
  if (dladdr((void *)dds_create_participant, &info) != 0 && info.dli_fname != NULL)
    return info.dli_fname;
  return MCC_CYCLONE_LIB;
}

/* SampleInfo: Cyclone's dds_sample_info_t plus the time the sample was taken, copied as one
 * struct (a tuple of 13 Python ints per sample cost more than decoding the sample). */
typedef struct
{
  PyObject_HEAD dds_sample_info_t si;
  long long taken_ns;
} SampleInfoObject;

#define SI_MEMBER(name, type, field, doc) \
  {name, type, offsetof(SampleInfoObject, field), READONLY, doc}

static PyMemberDef sample_info_members[] = {
    SI_MEMBER("sample_state", T_UINT, si.sample_state, "DDS sample state bits"),
    SI_MEMBER("view_state", T_UINT, si.view_state, "DDS view state bits"),
    SI_MEMBER("instance_state", T_UINT, si.instance_state, "DDS instance state bits"),
    SI_MEMBER("valid_data", T_BOOL, si.valid_data, "False for a dispose/unregister notice"),
    SI_MEMBER("source_timestamp", T_LONGLONG, si.source_timestamp,
              "the writer's timestamp, ns since the epoch (the sender's clock)"),
    SI_MEMBER("instance_handle", T_ULONGLONG, si.instance_handle, "local handle of the instance"),
    SI_MEMBER("publication_handle", T_ULONGLONG, si.publication_handle,
              "local handle of the writer that sent it"),
    SI_MEMBER("disposed_generation_count", T_UINT, si.disposed_generation_count, NULL),
    SI_MEMBER("no_writers_generation_count", T_UINT, si.no_writers_generation_count, NULL),
    SI_MEMBER("sample_rank", T_UINT, si.sample_rank, NULL),
    SI_MEMBER("generation_rank", T_UINT, si.generation_rank, NULL),
    SI_MEMBER("absolute_generation_rank", T_UINT, si.absolute_generation_rank, NULL),
    SI_MEMBER("taken_ns", T_LONGLONG, taken_ns,
              "this host's clock when the sample was taken from the reader cache"),
    {NULL, 0, 0, 0, NULL}};

static PyTypeObject SampleInfoType;

static PyObject *make_info(const dds_sample_info_t *si, dds_time_t now)
{
  SampleInfoObject *info = PyObject_New(SampleInfoObject, &SampleInfoType);
  if (info == NULL)
    return NULL;
  info->si = *si;
  info->taken_ns = now;
  return (PyObject *)info;
}

/* SampleInfo((sample_state, view_state, instance_state, valid_data, source_timestamp,
 * instance_handle, publication_handle, disposed_generation_count, no_writers_generation_count,
 * sample_rank, generation_rank, absolute_generation_rank, taken_ns)): for samples that did not
 * come from a reader (the persistence service's history). */
static PyObject *sample_info_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
  PyObject *values;
  (void)type;
  if (kwargs != NULL && PyDict_Size(kwargs) > 0)
  {
    PyErr_SetString(PyExc_TypeError, "SampleInfo takes one sequence of 13 values");
    return NULL;
  }
  if (!PyArg_ParseTuple(args, "O", &values))
    return NULL;
  dds_sample_info_t si;
  unsigned int ss, vs, is, dgc, nwgc, sr, gr, agr;
  int valid;
  long long ts, taken;
  unsigned long long ih, ph;
  PyObject *tuple = PySequence_Tuple(values);
  if (tuple == NULL)
    return NULL;
  int ok = PyArg_ParseTuple(tuple, "IIIpLKKIIIIIL", &ss, &vs, &is, &valid, &ts, &ih, &ph, &dgc,
                            &nwgc, &sr, &gr, &agr, &taken);
  Py_DECREF(tuple);
  if (!ok)
    return NULL;
  memset(&si, 0, sizeof(si));
  si.sample_state = (dds_sample_state_t)ss;
  si.view_state = (dds_view_state_t)vs;
  si.instance_state = (dds_instance_state_t)is;
  si.valid_data = valid != 0;
  si.source_timestamp = ts;
  si.instance_handle = ih;
  si.publication_handle = ph;
  si.disposed_generation_count = dgc;
  si.no_writers_generation_count = nwgc;
  si.sample_rank = sr;
  si.generation_rank = gr;
  si.absolute_generation_rank = agr;
  return make_info(&si, taken);
}

static PyObject *sample_info_repr(PyObject *self)
{
  SampleInfoObject *o = (SampleInfoObject *)self;
  return PyUnicode_FromFormat("SampleInfo(valid_data=%s, source_timestamp=%lld, "
                              "publication_handle=%llu, instance_state=%u, taken_ns=%lld)",
                              o->si.valid_data ? "True" : "False",
                              (long long)o->si.source_timestamp,
                              (unsigned long long)o->si.publication_handle,
                              (unsigned)o->si.instance_state, o->taken_ns);
}

static PyTypeObject SampleInfoType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "mcc.bus._native.SampleInfo",
    .tp_basicsize = sizeof(SampleInfoObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "What DDS says about one taken sample.",
    .tp_members = sample_info_members,
    .tp_new = sample_info_new,
    .tp_repr = sample_info_repr,
};

/* One serialized sample to the writer; called without the GIL. The serdata is built by the
 * topic's own sertype, which checks the CDR against the type (a malformed sample is refused
 * here, before anything is sent) and computes the key. */
static dds_return_t write_cdr(dds_entity_t writer, const struct ddsi_sertype *st, const void *buf,
                              size_t len, dds_time_t ts, uint32_t statusinfo)
{
  ddsrt_iovec_t iov = {.iov_base = (void *)buf, .iov_len = (ddsrt_iov_len_t)len};
  struct ddsi_serdata *sd = ddsi_serdata_from_ser_iov(st, SDK_DATA, 1, &iov, len);
  if (sd == NULL)
    return DDS_RETCODE_BAD_PARAMETER;
  sd->statusinfo = statusinfo;
  sd->timestamp.v = ts < 0 ? dds_time() : ts;
  return dds_forwardcdr(writer, sd); /* consumes the reference */
}

static PyObject *native_write(PyObject *self, PyObject *args, PyObject *kwargs)
{
  static char *kwlist[] = {"writer", "data", "timestamp_ns", "dispose", NULL};
  int writer;
  Py_buffer data;
  long long ts = -1;
  int dispose = 0;
  (void)self;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "iy*|Lp", kwlist, &writer, &data, &ts, &dispose))
    return NULL;
  dds_return_t ret;
  Py_BEGIN_ALLOW_THREADS
  const struct ddsi_sertype *st;
  ret = dds_get_entity_sertype(writer, &st);
  if (ret >= 0)
    ret = write_cdr(writer, st, data.buf, (size_t)data.len, (dds_time_t)ts,
                    dispose ? DDSI_STATUSINFO_DISPOSE : 0);
  Py_END_ALLOW_THREADS
  PyBuffer_Release(&data);
  return PyLong_FromLong((long)ret);
}

static PyObject *native_write_many(PyObject *self, PyObject *args)
{
  int writer;
  PyObject *samples;
  (void)self;
  if (!PyArg_ParseTuple(args, "iO", &writer, &samples))
    return NULL;
  PyObject *seq = PySequence_Fast(samples, "samples must be a sequence of bytes-like objects");
  if (seq == NULL)
    return NULL;
  Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  Py_buffer *bufs = PyMem_Calloc((size_t)(n ? n : 1), sizeof(Py_buffer));
  if (bufs == NULL)
  {
    Py_DECREF(seq);
    return PyErr_NoMemory();
  }
  Py_ssize_t got = 0;
  for (; got < n; got++)
    if (PyObject_GetBuffer(PySequence_Fast_GET_ITEM(seq, got), &bufs[got], PyBUF_SIMPLE) < 0)
      break;
  PyObject *result = NULL;
  if (got == n)
  {
    dds_return_t ret;
    Py_ssize_t written = 0;
    Py_BEGIN_ALLOW_THREADS
    const struct ddsi_sertype *st;
    ret = dds_get_entity_sertype(writer, &st);
    for (; ret >= 0 && written < n; written++)
    {
      ret = write_cdr(writer, st, bufs[written].buf, (size_t)bufs[written].len, -1, 0);
      if (ret < 0)
        break;
    }
    if (ret > 0)
      ret = 0;
    Py_END_ALLOW_THREADS
    result = Py_BuildValue("(ni)", written, (int)ret);
  }
  for (Py_ssize_t i = 0; i < got; i++)
    PyBuffer_Release(&bufs[i]);
  PyMem_Free(bufs);
  Py_DECREF(seq);
  return result;
}

/* Cyclone seeds its process-wide random generator when the library is loaded; a process forked
 * after that (MCC's fork server loads it once for all its children) would draw the same
 * numbers as its siblings, and iceoryx refuses a second process with the same runtime name
 * (drawn at random by the psmx plugin). Advancing the generator by the pid gives every child
 * its own sequence. */
static PyObject *native_after_fork(PyObject *self, PyObject *unused)
{
  (void)self;
  (void)unused;
  long n = (long)getpid();
  Py_BEGIN_ALLOW_THREADS
  for (long i = 0; i < n; i++)
    (void)ddsrt_random();
  Py_END_ALLOW_THREADS
  Py_RETURN_NONE;
}

static PyObject *native_flush(PyObject *self, PyObject *args)
{
  int writer;
  (void)self;
  if (!PyArg_ParseTuple(args, "i", &writer))
    return NULL;
  dds_return_t ret;
  Py_BEGIN_ALLOW_THREADS
  ret = dds_write_flush(writer);
  Py_END_ALLOW_THREADS
  return PyLong_FromLong((long)ret);
}

static PyObject *native_attach(PyObject *self, PyObject *args)
{
  int waitset, entity;
  (void)self;
  if (!PyArg_ParseTuple(args, "ii", &waitset, &entity))
    return NULL;
  return PyLong_FromLong((long)dds_waitset_attach(waitset, entity, (dds_attach_t)entity));
}

static PyObject *native_detach(PyObject *self, PyObject *args)
{
  int waitset, entity;
  (void)self;
  if (!PyArg_ParseTuple(args, "ii", &waitset, &entity))
    return NULL;
  return PyLong_FromLong((long)dds_waitset_detach(waitset, entity));
}

#define MAX_TRIGGERED 256

static PyObject *native_wait(PyObject *self, PyObject *args)
{
  int waitset;
  long long timeout_ns;
  (void)self;
  if (!PyArg_ParseTuple(args, "iL", &waitset, &timeout_ns))
    return NULL;
  dds_attach_t xs[MAX_TRIGGERED];
  dds_return_t n;
  Py_BEGIN_ALLOW_THREADS
  n = dds_waitset_wait(waitset, xs, MAX_TRIGGERED, (dds_duration_t)timeout_ns);
  Py_END_ALLOW_THREADS
  if (n < 0)
    return PyLong_FromLong((long)n);
  if (n > MAX_TRIGGERED)
    n = MAX_TRIGGERED;
  PyObject *list = PyList_New(n);
  for (dds_return_t i = 0; list != NULL && i < n; i++)
  {
    PyObject *v = PyLong_FromLongLong((long long)xs[i]);
    if (v == NULL)
      Py_CLEAR(list);
    else
      PyList_SET_ITEM(list, i, v);
  }
  return list;
}

/* Flat decoding: the lean codec of mcc.bus.codec (flat types: primitives, enums, strings and
 * byte sequences, final or appendable), read here straight from the taken serdata into the
 * instance, so a sample costs one copy of its variable-length fields and no Python frame
 * (measured: 1.0 us a 1 KiB PerfSample through the generated Python decoder). Written by hand
 * because it is the product's receive path. The rules are the Python decoder's, which stays the
 * reference: little-endian XCDR1 (alignment up to 8) or XCDR2 (up to 4; a delimiter header for
 * appendable types), alignment counted from the end of the encapsulation header, a string's
 * length includes its terminating NUL, text is strict UTF-8. A sample this code does not decode
 * (another encoding, a length past the end, bad UTF-8, an enum value outside the enum) is handed
 * back as its (bytes, SampleInfo) tuple for the Python decoder, which decodes it or says what is
 * wrong with it: one path for error messages. */
enum flat_kind
{
  FK_I8, FK_U8, FK_BOOL, FK_I16, FK_U16, FK_I32, FK_U32, FK_I64, FK_U64, FK_F32, FK_F64,
  FK_STR, FK_BYTES
};

/* One fixed-size field's bytes, read or written little-endian in place. */
typedef union
{
  int8_t i8;
  uint8_t u8;
  int16_t i16;
  uint16_t u16;
  int32_t i32;
  uint32_t u32;
  int64_t i64;
  uint64_t u64;
  float f32;
  double f64;
} flat_word;

typedef struct
{
  PyObject *name;     /* interned attribute name */
  PyObject *enum_cls; /* called with the uint32 value, or NULL */
  int kind;
  unsigned size, align1, align2; /* size; alignment in XCDR1 and XCDR2 */
} flat_field;

typedef struct
{
  PyTypeObject *cls;
  int appendable;
  unsigned char kind2; /* the XCDR2 encapsulation identifier of the type */
  Py_ssize_t nfields;
  flat_field fields[];
} flat_layout;

#define FLAT_LAYOUT_CAPSULE "mcc.bus._native.flat_layout"

static void flat_layout_release(flat_layout *l)
{
  for (Py_ssize_t i = 0; i < l->nfields; i++)
  {
    Py_XDECREF(l->fields[i].name);
    Py_XDECREF(l->fields[i].enum_cls);
  }
  Py_XDECREF(l->cls);
  PyMem_Free(l);
}

static void flat_layout_free(PyObject *capsule)
{
  flat_layout *l = PyCapsule_GetPointer(capsule, FLAT_LAYOUT_CAPSULE);
  if (l != NULL)
    flat_layout_release(l);
}

static const struct
{
  const char *code;
  int kind;
  unsigned size;
} flat_codes[] = {{"b", FK_I8, 1},  {"B", FK_U8, 1},  {"?", FK_BOOL, 1}, {"h", FK_I16, 2},
                  {"H", FK_U16, 2}, {"i", FK_I32, 4}, {"I", FK_U32, 4},  {"q", FK_I64, 8},
                  {"Q", FK_U64, 8}, {"f", FK_F32, 4}, {"d", FK_F64, 8},  {"str", FK_STR, 4},
                  {"bytes", FK_BYTES, 4}};

/* flat_layout(cls, appendable, kind2, ((name, code, align1, align2, enum_or_None), ...)) */
static PyObject *native_flat_layout(PyObject *self, PyObject *args)
{
  (void)self;
  PyObject *cls, *fields;
  int appendable, kind2;
  if (!PyArg_ParseTuple(args, "O!piO!", &PyType_Type, &cls, &appendable, &kind2, &PyTuple_Type,
                        &fields))
    return NULL;
#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
  Py_RETURN_NONE; /* this decoder reads little-endian words in place */
#endif
  Py_ssize_t n = PyTuple_GET_SIZE(fields);
  flat_layout *l = PyMem_Calloc(1, sizeof(*l) + (size_t)n * sizeof(flat_field));
  if (l == NULL)
    return PyErr_NoMemory();
  Py_INCREF(cls);
  l->cls = (PyTypeObject *)cls;
  l->appendable = appendable;
  l->kind2 = (unsigned char)kind2;
  for (Py_ssize_t i = 0; i < n; i++)
  {
    PyObject *name, *enum_cls;
    const char *code;
    unsigned a1, a2;
    flat_field *f = &l->fields[i];
    if (!PyArg_ParseTuple(PyTuple_GET_ITEM(fields, i), "UsIIO", &name, &code, &a1, &a2,
                          &enum_cls))
      goto fail;
    f->kind = -1;
    for (size_t k = 0; k < sizeof(flat_codes) / sizeof(flat_codes[0]); k++)
      if (strcmp(code, flat_codes[k].code) == 0)
      {
        f->kind = flat_codes[k].kind;
        f->size = flat_codes[k].size;
      }
    if (f->kind < 0 || a1 == 0 || a2 == 0 || (a1 & (a1 - 1)) || (a2 & (a2 - 1)) || a1 > 8 ||
        a2 > 8)
    {
      PyErr_Format(PyExc_ValueError, "flat_layout: field %R: code %s, alignments %u/%u", name,
                   code, a1, a2);
      goto fail;
    }
    f->align1 = a1;
    f->align2 = a2;
    Py_INCREF(name);
    PyUnicode_InternInPlace(&name);
    f->name = name;
    if (enum_cls != Py_None)
    {
      Py_INCREF(enum_cls);
      f->enum_cls = enum_cls;
    }
    l->nfields = i + 1;
  }
  PyObject *capsule = PyCapsule_New(l, FLAT_LAYOUT_CAPSULE, flat_layout_free);
  if (capsule != NULL)
    return capsule;
fail:
  flat_layout_release(l);
  return NULL;
}

static PyObject *empty_args; /* () for tp_new */

/* The value of one field at *pos (advanced), or NULL (no exception set) if it does not fit. */
static PyObject *flat_field_value(const flat_field *f, const unsigned char *d, size_t len,
                                  size_t *pos, int xcdr2)
{
  size_t p = *pos;
  unsigned align = (f->kind == FK_STR || f->kind == FK_BYTES) ? 4 : (xcdr2 ? f->align2 : f->align1);
  p += (size_t)(-(p - 4)) & (align - 1);
  if (p > len || len - p < f->size)
    return NULL;
  const unsigned char *at = d + p;
  PyObject *v;
  flat_word w;
  memcpy(&w, at, f->size);
  p += f->size;
  switch (f->kind)
  {
  case FK_I8: v = PyLong_FromLong(w.i8); break;
  case FK_U8: v = PyLong_FromLong(w.u8); break;
  case FK_BOOL: v = PyBool_FromLong(w.u8 != 0); break;
  case FK_I16: v = PyLong_FromLong(w.i16); break;
  case FK_U16: v = PyLong_FromLong(w.u16); break;
  case FK_I32: v = PyLong_FromLong(w.i32); break;
  case FK_U32: v = PyLong_FromUnsignedLong(w.u32); break;
  case FK_I64: v = PyLong_FromLongLong(w.i64); break;
  case FK_U64: v = PyLong_FromUnsignedLongLong(w.u64); break;
  case FK_F32: v = PyFloat_FromDouble((double)w.f32); break;
  case FK_F64: v = PyFloat_FromDouble(w.f64); break;
  default: /* FK_STR, FK_BYTES: a uint32 length, then the bytes */
    if (len - p < w.u32)
      return NULL;
    if (f->kind == FK_BYTES)
      v = PyBytes_FromStringAndSize((const char *)d + p, (Py_ssize_t)w.u32);
    else /* the length counts the terminating NUL, which is not text */
      v = PyUnicode_DecodeUTF8((const char *)d + p, w.u32 ? (Py_ssize_t)w.u32 - 1 : 0, NULL);
    p += w.u32;
  }
  if (v != NULL && f->enum_cls != NULL)
  {
    PyObject *e = PyObject_CallOneArg(f->enum_cls, v);
    Py_DECREF(v);
    v = e;
  }
  if (v == NULL)
    PyErr_Clear(); /* the Python decoder says what is wrong */
  *pos = p;
  return v;
}

/* A decoded instance of l->cls with sample_info set, or NULL (no exception set) to hand the
 * sample to the Python decoder. */
static PyObject *flat_decode(const flat_layout *l, const unsigned char *d, size_t len,
                             PyObject *info)
{
  static PyObject *sample_info_name;
  if (sample_info_name == NULL && (sample_info_name = PyUnicode_InternFromString("sample_info")) == NULL)
  {
    PyErr_Clear();
    return NULL;
  }
  if (len < 4 || d[0] != 0)
    return NULL;
  int xcdr2;
  if (d[1] == 0x01)
    xcdr2 = 0;
  else if (d[1] == l->kind2)
    xcdr2 = 1;
  else
    return NULL; /* big-endian, or an encoding the type's codec does not generate */
  size_t pos = (xcdr2 && l->appendable) ? 8 : 4; /* the delimiter header counts for alignment */
  if (pos > len)
    return NULL;
  PyObject *obj = l->cls->tp_new(l->cls, empty_args, NULL);
  if (obj == NULL)
  {
    PyErr_Clear();
    return NULL;
  }
  for (Py_ssize_t i = 0; i < l->nfields; i++)
  {
    PyObject *v = flat_field_value(&l->fields[i], d, len, &pos, xcdr2);
    if (v == NULL || PyObject_SetAttr(obj, l->fields[i].name, v) < 0)
    {
      Py_XDECREF(v);
      Py_DECREF(obj);
      PyErr_Clear();
      return NULL;
    }
    Py_DECREF(v);
  }
  if (PyObject_SetAttr(obj, sample_info_name, info) < 0)
  {
    Py_DECREF(obj);
    PyErr_Clear();
    return NULL;
  }
  return obj;
}

/* Flat encoding, the other way: the fields of an instance written as the Python encoder of
 * mcc.bus.codec writes them (byte for byte, trailing padding to 4 included), into `out`.
 * Returns 0, or -1 (no exception set) for anything it will not encode (a value of another
 * type, an integer out of range, a float too large for float32, a str that is not UTF-8):
 * the Python encoder then raises its own error. */
typedef struct
{
  unsigned char *p;
  size_t len, cap;
  unsigned char local[2048];
} flat_buffer;

static int flat_reserve(flat_buffer *b, size_t more)
{
  if (b->cap - b->len >= more)
    return 0;
  size_t cap = b->cap * 2 > b->len + more ? b->cap * 2 : b->len + more;
  unsigned char *p = b->p == b->local ? PyMem_Malloc(cap) : PyMem_Realloc(b->p, cap);
  if (p == NULL)
    return -1;
  if (b->p == b->local)
    memcpy(p, b->local, b->len);
  b->p = p;
  b->cap = cap;
  return 0;
}

static void flat_buffer_free(flat_buffer *b)
{
  if (b->p != b->local)
    PyMem_Free(b->p);
}

/* Zero padding up to `align` (counted from the end of the encapsulation header), then room. */
static unsigned char *flat_put(flat_buffer *b, unsigned align, size_t size)
{
  size_t pad = (size_t)(-(b->len - 4)) & (align - 1);
  if (flat_reserve(b, pad + size) < 0)
    return NULL;
  memset(b->p + b->len, 0, pad);
  b->len += pad;
  unsigned char *at = b->p + b->len;
  b->len += size;
  return at;
}

static int flat_encode_field(const flat_field *f, PyObject *v, flat_buffer *b, int xcdr2)
{
  PyObject *held = NULL;
  int rc = -1;
  if (f->enum_cls != NULL)
  {
    static PyObject *value_name;
    if (value_name == NULL && (value_name = PyUnicode_InternFromString("value")) == NULL)
      return -1;
    if ((held = v = PyObject_GetAttr(v, value_name)) == NULL)
      return -1;
  }
  if (f->kind == FK_STR || f->kind == FK_BYTES)
  {
    Py_buffer view = {0};
    const char *src;
    Py_ssize_t n;
    if (f->kind == FK_STR)
    {
      if (!PyUnicode_Check(v) || (src = PyUnicode_AsUTF8AndSize(v, &n)) == NULL)
        goto out;
    }
    else
    {
      if (!(PyBytes_Check(v) || PyByteArray_Check(v)) ||
          PyObject_GetBuffer(v, &view, PyBUF_SIMPLE) < 0)
        goto out;
      src = view.buf;
      n = view.len;
    }
    size_t total = (size_t)n + (f->kind == FK_STR); /* the NUL */
    unsigned char *at = total <= UINT32_MAX ? flat_put(b, 4, 4 + total) : NULL;
    if (at != NULL)
    {
      uint32_t n32 = (uint32_t)total;
      memcpy(at, &n32, 4);
      memcpy(at + 4, src, (size_t)n);
      if (f->kind == FK_STR)
        at[4 + n] = 0;
      rc = 0;
    }
    if (view.obj != NULL)
      PyBuffer_Release(&view);
    goto out;
  }
  flat_word w;
  if (f->kind == FK_F32 || f->kind == FK_F64)
  {
    double d = PyFloat_AsDouble(v);
    if (d == -1.0 && PyErr_Occurred())
      goto out;
    if (f->kind == FK_F64)
      w.f64 = d;
    else if (isfinite(d) && (d > FLT_MAX || d < -FLT_MAX))
      goto out; /* struct.pack('f') refuses it */
    else
      w.f32 = (float)d;
  }
  else if (f->kind == FK_BOOL)
  {
    int t = PyObject_IsTrue(v);
    if (t < 0)
      goto out;
    w.u8 = (uint8_t)t;
  }
  else if (f->kind == FK_U64)
  {
    if (!PyLong_Check(v))
      goto out;
    w.u64 = PyLong_AsUnsignedLongLong(v);
    if (w.u64 == (uint64_t)-1 && PyErr_Occurred())
      goto out;
  }
  else
  {
    if (!PyLong_Check(v))
      goto out;
    long long x = PyLong_AsLongLong(v);
    if (x == -1 && PyErr_Occurred())
      goto out;
    switch (f->kind)
    {
    case FK_I8: if (x < INT8_MIN || x > INT8_MAX) goto out; w.i8 = (int8_t)x; break;
    case FK_U8: if (x < 0 || x > UINT8_MAX) goto out; w.u8 = (uint8_t)x; break;
    case FK_I16: if (x < INT16_MIN || x > INT16_MAX) goto out; w.i16 = (int16_t)x; break;
    case FK_U16: if (x < 0 || x > UINT16_MAX) goto out; w.u16 = (uint16_t)x; break;
    case FK_I32: if (x < INT32_MIN || x > INT32_MAX) goto out; w.i32 = (int32_t)x; break;
    case FK_U32: if (x < 0 || x > UINT32_MAX) goto out; w.u32 = (uint32_t)x; break;
    default: w.i64 = (int64_t)x; /* FK_I64 */
    }
  }
  unsigned char *at = flat_put(b, xcdr2 ? f->align2 : f->align1, f->size);
  if (at != NULL)
  {
    memcpy(at, &w, f->size);
    rc = 0;
  }
out:
  Py_XDECREF(held);
  return rc;
}

static int flat_encode(const flat_layout *l, PyObject *obj, int xcdr2, flat_buffer *b)
{
  b->p = b->local;
  b->len = 0;
  b->cap = sizeof(b->local);
  int delimited = xcdr2 && l->appendable;
  unsigned char *hdr = flat_put(b, 1, delimited ? 8 : 4);
  hdr[0] = 0;
  hdr[1] = xcdr2 ? l->kind2 : 0x01;
  hdr[2] = hdr[3] = 0;
  for (Py_ssize_t i = 0; i < l->nfields; i++)
  {
    PyObject *v = PyObject_GetAttr(obj, l->fields[i].name);
    int rc = v == NULL ? -1 : flat_encode_field(&l->fields[i], v, b, xcdr2);
    Py_XDECREF(v);
    if (rc < 0)
    {
      PyErr_Clear();
      return -1;
    }
  }
  if (delimited)
  {
    uint32_t body = (uint32_t)(b->len - 8);
    memcpy(b->p + 4, &body, 4);
  }
  size_t pad = (size_t)(-(b->len - 4)) & 3;
  unsigned char *end = flat_put(b, 1, pad);
  if (end == NULL)
    return -1;
  memset(end, 0, pad);
  return 0;
}

/* `sample` encoded by the layout in `capsule`, then written by `writer` (the retcode), or, for
 * writer 0, returned as bytes; None when the encoder declines (the Python encoder's job). */
static PyObject *encode_flat_then(PyObject *capsule, PyObject *sample, int xcdr2, int writer,
                                  int dispose)
{
  const flat_layout *l = PyCapsule_GetPointer(capsule, FLAT_LAYOUT_CAPSULE);
  if (l == NULL)
    return NULL;
  flat_buffer b;
  PyObject *out;
  if (flat_encode(l, sample, xcdr2, &b) < 0)
  {
    Py_INCREF(Py_None);
    out = Py_None;
  }
  else if (writer == 0)
    out = PyBytes_FromStringAndSize((const char *)b.p, (Py_ssize_t)b.len);
  else
  {
    dds_return_t ret;
    Py_BEGIN_ALLOW_THREADS
    const struct ddsi_sertype *st;
    ret = dds_get_entity_sertype(writer, &st);
    if (ret >= 0)
      ret = write_cdr(writer, st, b.p, b.len, -1, dispose ? DDSI_STATUSINFO_DISPOSE : 0);
    Py_END_ALLOW_THREADS
    out = PyLong_FromLong((long)ret);
  }
  flat_buffer_free(&b);
  return out;
}

/* encode_flat(layout, sample, xcdr2) -> bytes | None (None: the Python encoder's job) */
static PyObject *native_encode_flat(PyObject *self, PyObject *args)
{
  (void)self;
  PyObject *capsule, *sample;
  int xcdr2;
  if (!PyArg_ParseTuple(args, "OOp", &capsule, &sample, &xcdr2))
    return NULL;
  return encode_flat_then(capsule, sample, xcdr2, 0, 0);
}

/* write_flat(writer, layout, sample, xcdr2, dispose=False) -> retcode | None: the sample
 * encoded here and written, or None (nothing written) when the Python encoder must do it. */
static PyObject *native_write_flat(PyObject *self, PyObject *args)
{
  (void)self;
  int writer, xcdr2, dispose = 0;
  PyObject *capsule, *sample;
  if (!PyArg_ParseTuple(args, "iOOp|p", &writer, &capsule, &sample, &xcdr2, &dispose))
    return NULL;
  if (writer <= 0)
    return PyLong_FromLong((long)DDS_RETCODE_BAD_PARAMETER);
  return encode_flat_then(capsule, sample, xcdr2, writer, dispose);
}

/* The sample as (bytes, SampleInfo), or decoded by `layout` when it has data and decodes. */
static PyObject *taken_item(struct ddsi_serdata *sd, const dds_sample_info_t *si, dds_time_t now,
                            const flat_layout *layout)
{
  uint32_t size = ddsi_serdata_size(sd);
  PyObject *info = make_info(si, now);
  if (info == NULL)
    return NULL;
  if (layout != NULL)
  {
    ddsrt_iovec_t iov;
    struct ddsi_serdata *ref = ddsi_serdata_to_ser_ref(sd, 0, size, &iov);
    PyObject *obj = NULL;
    if (ref != NULL)
    {
      if (iov.iov_len == size)
        obj = flat_decode(layout, iov.iov_base, size, info);
      ddsi_serdata_to_ser_unref(ref, &iov);
    }
    if (obj != NULL)
    {
      Py_DECREF(info);
      return obj;
    }
  }
  PyObject *data = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)size);
  if (data != NULL && size > 0)
    ddsi_serdata_to_ser(sd, 0, size, PyBytes_AS_STRING(data));
  PyObject *item = data ? PyTuple_Pack(2, data, info) : NULL;
  Py_XDECREF(data);
  Py_DECREF(info);
  return item;
}

static PyObject *readtake(PyObject *args, int take)
{
  int reader;
  unsigned int mask;
  Py_ssize_t max_samples;
  PyObject *capsule = Py_None;
  if (!PyArg_ParseTuple(args, "iIn|O", &reader, &mask, &max_samples, &capsule))
    return NULL;
  if (max_samples <= 0 || max_samples > MAX_BATCH)
  {
    PyErr_Format(PyExc_ValueError, "max_samples = %zd: must be 1..%d", max_samples, MAX_BATCH);
    return NULL;
  }
  const flat_layout *layout = NULL;
  if (capsule != Py_None && (layout = PyCapsule_GetPointer(capsule, FLAT_LAYOUT_CAPSULE)) == NULL)
    return NULL;
  struct ddsi_serdata **sds = PyMem_Calloc((size_t)max_samples, sizeof(*sds));
  dds_sample_info_t *infos = PyMem_Calloc((size_t)max_samples, sizeof(*infos));
  if (sds == NULL || infos == NULL)
  {
    PyMem_Free(sds);
    PyMem_Free(infos);
    return PyErr_NoMemory();
  }
  dds_return_t n;
  dds_time_t now;
  Py_BEGIN_ALLOW_THREADS
  if (take)
    n = dds_takecdr(reader, sds, (uint32_t)max_samples, infos, mask);
  else
    n = dds_readcdr(reader, sds, (uint32_t)max_samples, infos, mask);
  now = dds_time();
  Py_END_ALLOW_THREADS
  if (n < 0)
  {
    PyMem_Free(sds);
    PyMem_Free(infos);
    return PyLong_FromLong((long)n);
  }
  PyObject *list = PyList_New(0);
  for (dds_return_t i = 0; i < n; i++)
  {
    struct ddsi_serdata *sd = sds[i];
    /* A dispose/unregister notice (valid_data false) carries the instance's key; with a
     * layout (samples for the application) it is left out. */
    if (list != NULL && (layout == NULL || infos[i].valid_data))
    {
      PyObject *item = taken_item(sd, &infos[i], now, layout);
      if (item == NULL || PyList_Append(list, item) < 0)
        Py_CLEAR(list);
      Py_XDECREF(item);
    }
    ddsi_serdata_unref(sd);
  }
  PyMem_Free(sds);
  PyMem_Free(infos);
  return list;
}

static PyObject *native_take(PyObject *self, PyObject *args)
{
  (void)self;
  return readtake(args, 1);
}

static PyObject *native_read(PyObject *self, PyObject *args)
{
  (void)self;
  return readtake(args, 0);
}

/* Bulk transfers (mcc.bus.bulk): a buffer crosses as BulkBlock samples, written and read here
 * in one call each way with the GIL released and no Python object per block, as MPI's
 * Send/Recv of a buffer is one call. The endpoints are made here with the C type idlc
 * generates from idl/mcc.idl (a fixed-size type): between the processes of one host on the
 * `shm` transport a block is a loan of iceoryx shared memory, filled in place by the sender and
 * read in place by the receiver (one copy in, one copy out, as MPI's shared memory); to other
 * hosts Cyclone sends it over UDP. cyclonedds-python's own topic types cannot be loaned (its
 * sertype serializes), which is why these endpoints are not Python's. */
#define BULK_TAKE 64
#define BULK_BLOCK ((Py_ssize_t)sizeof(((mcc_BulkBlock *)0)->data))

static dds_entity_t bulk_reader(dds_entity_t parent, dds_entity_t topic, const dds_qos_t *qos);

/* bulk_endpoint(parent, topic_name, qos_address, is_writer) -> entity | retcode: a writer
 * (parent a publisher) or reader (a subscriber) of BulkBlock on topic_name, with the QoS at
 * qos_address (a dds_qos_t the caller made and still owns). */
static PyObject *native_bulk_endpoint(PyObject *self, PyObject *args)
{
  int parent, is_writer;
  const char *name;
  unsigned long long qos_address;
  (void)self;
  if (!PyArg_ParseTuple(args, "isKp", &parent, &name, &qos_address, &is_writer))
    return NULL;
  const dds_qos_t *qos = (const dds_qos_t *)(uintptr_t)qos_address;
  dds_entity_t ret;
  Py_BEGIN_ALLOW_THREADS
  dds_entity_t participant = dds_get_participant(parent);
  ret = participant < 0 ? participant
                        : dds_create_topic(participant, &mcc_BulkBlock_desc, name, qos, NULL);
  if (ret >= 0)
    ret = is_writer ? dds_create_writer(parent, ret, qos, NULL) : bulk_reader(parent, ret, qos);
  Py_END_ALLOW_THREADS
  return PyLong_FromLong((long)ret);
}

/* Whether a block can be placed in a buffer of `total` bytes (0: any) of transfer `count`
 * blocks (0: not known yet). */
/* A block's header: a BulkBlock without its data. */
typedef struct
{
  uint64_t transfer, offset, total;
  uint32_t index, count, length;
} bulk_head_t;

static bulk_head_t bulk_head_of(const mcc_BulkBlock *b)
{
  return (bulk_head_t){.transfer = b->transfer, .offset = b->offset, .total = b->total,
                       .index = b->index, .count = b->count, .length = b->length};
}

static int bulk_fits(const bulk_head_t *b, uint64_t total, uint32_t count)
{
  return b->count > 0 && b->index < b->count && b->length <= (uint32_t)BULK_BLOCK &&
         b->offset <= b->total && b->length <= b->total - b->offset &&
         (total == 0 || b->total == total) && (count == 0 || b->count == count);
}

/* A BulkBlock serialized as CDR: the 4-byte encapsulation header (PLAIN_CDR2, little endian),
 * then transfer at 0, index 8, count 12, offset 16, total 24, length 32 and the data at 36
 * (every member of the @final struct at its natural alignment, no padding; the Python reader
 * of tests/bus/test_bulk.py checks it against Cyclone's own deserializer). */
#define BULK_CDR_HEAD 40
#define BULK_CDR_SIZE (BULK_CDR_HEAD + BULK_BLOCK)

static void put_le(unsigned char *at, uint64_t value, int bytes)
{
  for (int i = 0; i < bytes; i++)
    at[i] = (unsigned char)(value >> (8 * i));
}

static uint64_t get_le(const unsigned char *at, int bytes)
{
  uint64_t value = 0;
  for (int i = bytes - 1; i >= 0; i--)
    value = (value << 8) | at[i];
  return value;
}

/* One block written from its serialized form, built around the caller's bytes: the serdata is
 * the one copy the sender makes. A sample would be filled and then serialized, two copies and,
 * for a loan, a block-sized memset as Cyclone zeroes it: measured with perf on a UDP sender, the
 * memset alone was 12 % of its time, and the sender's CPU per block fell by a quarter without
 * them. Retried on DDS_RETCODE_TIMEOUT (flow control) until give_up. */
static dds_return_t bulk_write_cdr(dds_entity_t writer, const struct ddsi_sertype *st,
                                   uint64_t transfer, uint32_t index, uint32_t count,
                                   uint64_t offset, uint64_t total, const unsigned char *data,
                                   size_t n, dds_time_t give_up)
{
  static const unsigned char zeros[BULK_BLOCK]; /* the fixed-size tail of a last, short block */
  unsigned char cdr[BULK_CDR_HEAD] = {0x00, 0x07, 0x00, 0x00};
  put_le(cdr + 4, transfer, 8);
  put_le(cdr + 12, index, 4);
  put_le(cdr + 16, count, 4);
  put_le(cdr + 20, offset, 8);
  put_le(cdr + 28, total, 8);
  put_le(cdr + 36, n, 4);
  ddsrt_iovec_t iov[3] = {{.iov_base = cdr, .iov_len = BULK_CDR_HEAD},
                          {.iov_base = (void *)data, .iov_len = n},
                          {.iov_base = (void *)zeros, .iov_len = (size_t)BULK_BLOCK - n}};
  struct ddsi_serdata *sd =
      ddsi_serdata_from_ser_iov(st, SDK_DATA, n < (size_t)BULK_BLOCK ? 3 : 2, iov, BULK_CDR_SIZE);
  if (sd == NULL)
    return DDS_RETCODE_ERROR;
  dds_return_t ret;
  do /* dds_writecdr consumes a reference, also when it times out */
    ret = dds_writecdr(writer, ddsi_serdata_ref(sd));
  while (ret == DDS_RETCODE_TIMEOUT && dds_time() < give_up);
  ddsi_serdata_unref(sd);
  return ret;
}

/* send_bulk(writer, transfer, buffer, patience_ns) -> (sent_bytes, retcode): the buffer in
 * blocks of BULK_BLOCK (63 KiB); each block is retried while flow control holds it back, for at most
 * patience_ns. */
static PyObject *native_send_bulk(PyObject *self, PyObject *args)
{
  int writer;
  unsigned long long transfer;
  Py_buffer buf;
  long long patience_ns;
  (void)self;
  if (!PyArg_ParseTuple(args, "iKy*L", &writer, &transfer, &buf, &patience_ns))
    return NULL;
  Py_ssize_t count = (buf.len + BULK_BLOCK - 1) / BULK_BLOCK;
  if (count == 0 || count > (Py_ssize_t)UINT32_MAX)
  {
    PyErr_Format(PyExc_ValueError, "bulk: %zd bytes: want a non-empty buffer of fewer than "
                 "2^32 blocks of %zd bytes", buf.len, BULK_BLOCK);
    PyBuffer_Release(&buf);
    return NULL;
  }
  dds_return_t ret = 0;
  Py_ssize_t sent = 0;
  Py_BEGIN_ALLOW_THREADS
  /* Without shared memory a block goes out from its serialized form (bulk_write_cdr); on `shm`
   * it is a loan of iceoryx shared memory, filled in place. */
  const struct ddsi_sertype *st = NULL;
  if (dds_is_shared_memory_available(writer) || dds_get_entity_sertype(writer, &st) < 0)
    st = NULL;
  for (Py_ssize_t k = 0; ret >= 0 && k < count; k++)
  {
    size_t offset = (size_t)k * (size_t)BULK_BLOCK;
    size_t n = (size_t)buf.len - offset < (size_t)BULK_BLOCK ? (size_t)buf.len - offset
                                                             : (size_t)BULK_BLOCK;
    mcc_BulkBlock *b = NULL;
    dds_time_t give_up = dds_time() + (dds_duration_t)patience_ns;
    if (st != NULL)
    {
      if ((ret = bulk_write_cdr(writer, st, transfer, (uint32_t)k, (uint32_t)count, offset,
                                (uint64_t)buf.len, (const unsigned char *)buf.buf + offset, n,
                                give_up)) >= 0)
        sent += (Py_ssize_t)n;
      continue;
    }
    /* On `shm` a loan is a chunk of the host's iceoryx pool, which a receiver behind holds:
     * no chunk free is the shared-memory path's flow control, waited out like a write's. */
    dds_duration_t pause = DDS_USECS(50); /* doubled up to 2 ms: iceoryx logs each refusal */
    while ((ret = dds_request_loan(writer, (void **)&b)) < 0 && ret != DDS_RETCODE_BAD_PARAMETER &&
           dds_time() < give_up)
    {
      dds_sleepfor(pause);
      pause = pause < DDS_MSECS(2) ? 2 * pause : pause;
    }
    if (ret < 0)
      break;
    b->transfer = transfer;
    b->index = (uint32_t)k;
    b->count = (uint32_t)count;
    b->offset = offset;
    b->total = (uint64_t)buf.len;
    b->length = (uint32_t)n;
    memcpy(b->data, (const char *)buf.buf + offset, n);
    if (n < (size_t)BULK_BLOCK) /* no stale bytes of an earlier loan go out */
      memset(b->data + n, 0, (size_t)BULK_BLOCK - n);
    give_up = dds_time() + (dds_duration_t)patience_ns;
    while ((ret = dds_write(writer, b)) == DDS_RETCODE_TIMEOUT && dds_time() < give_up)
      ;
    if (ret < 0)
      dds_return_loan(writer, (void **)&b, 1); /* not written: the loan is still ours */
    else
      sent += (Py_ssize_t)n;
  }
  Py_END_ALLOW_THREADS
  PyBuffer_Release(&buf);
  return Py_BuildValue("(ni)", sent, ret < 0 ? (int)ret : 0);
}

typedef struct
{
  Py_ssize_t received, blocks, stray, bad, duplicate;
} bulk_tally_t;

/* One block into the transfer: its data copied into out at its offset (only counted when out
 * is NULL: a transfer discarded). */
static void bulk_place(const bulk_head_t *b, const unsigned char *data, uint64_t transfer,
                       unsigned char *out, uint64_t total, unsigned char **seen, uint32_t *count,
                       bulk_tally_t *t)
{
  if (b->transfer != transfer)
  {
    t->stray++;
    return;
  }
  if (!bulk_fits(b, out == NULL ? 0 : total, *count))
  {
    t->bad++;
    return;
  }
  if (out == NULL)
  {
    t->received += (Py_ssize_t)b->length;
    t->blocks++;
    return;
  }
  if (*seen == NULL)
  {
    if ((*seen = calloc(b->count, 1)) == NULL)
    {
      t->bad++;
      return;
    }
    *count = b->count;
  }
  if ((*seen)[b->index])
  {
    t->duplicate++;
    return;
  }
  (*seen)[b->index] = 1;
  memcpy(out + b->offset, data, b->length);
  t->received += (Py_ssize_t)b->length;
  t->blocks++;
}

/* A bulk reader's receive in progress. Blocks are placed by the reader's data-available
 * listener, on Cyclone's receive thread as they arrive, while a receive_bulk call waits for the
 * transfer to be whole: the receiving thread is woken once a transfer, not once a block. Waking
 * it for each block (a waitset) doubled the receiving process's CPU per byte, measured with
 * Cyclone's own ddsperf (sub waitset: 0.66 CPU-seconds a GB, sub listener: 0.34) and with ours. */
typedef struct bulk_rx
{
  dds_entity_t reader;
  pthread_mutex_t lock;
  pthread_cond_t cond; /* signalled when the transfer is whole or taking failed */
  int active, discard;
  int orphan; /* its reader was deleted during a receive: freed when that receive returns */
  uint64_t transfer;
  dds_instance_handle_t instance;
  unsigned char *out;
  uint64_t total;
  unsigned char *seen;
  uint32_t count;
  bulk_tally_t t;
  dds_return_t error;
  int cdr;                 /* blocks taken serialized: the reader has no shared memory */
  mcc_BulkBlock *scratch;  /* a block that is not little-endian, deserialized */
  struct bulk_rx *next;
} bulk_rx_t;

static pthread_mutex_t bulk_rx_registry_lock = PTHREAD_MUTEX_INITIALIZER;
static bulk_rx_t *bulk_rx_registry;

/* The registered state of `reader` (registry lock held), unlinked when `unlink`. */
static bulk_rx_t *bulk_rx_find(dds_entity_t reader, int unlink)
{
  bulk_rx_t **at = &bulk_rx_registry;
  while (*at != NULL && (*at)->reader != reader)
    at = &(*at)->next;
  bulk_rx_t *rx = *at;
  if (rx != NULL && unlink)
    *at = rx->next;
  return rx;
}

static void bulk_rx_free(bulk_rx_t *rx)
{
  free(rx->scratch);
  pthread_cond_destroy(&rx->cond);
  pthread_mutex_destroy(&rx->lock);
  free(rx);
}

/* Blocks taken so far by the receive in progress, placed or dropped (rx->lock held). */
static Py_ssize_t bulk_rx_taken(const bulk_rx_t *rx)
{
  return rx->t.blocks + rx->t.stray + rx->t.bad + rx->t.duplicate;
}

/* Whether the receive in progress waits for more blocks (a discard waits until none come). */
static int bulk_rx_waiting(const bulk_rx_t *rx)
{
  return rx->error == 0 &&
         (rx->discard || rx->seen == NULL || rx->t.blocks < (Py_ssize_t)rx->count);
}

/* A block as it came over the network, read in place: its header into h, *data pointing at its
 * bytes inside sd (ref: what ddsi_serdata_to_ser_unref takes back). 1 when read; 0 when sd is
 * not a little-endian BulkBlock of the full size (then it is deserialized instead). Little-endian
 * XCDR1 and XCDR2 lay this @final struct out alike (every member at its natural alignment). */
static int bulk_cdr_view(struct ddsi_serdata *sd, bulk_head_t *h, const unsigned char **data,
                         struct ddsi_serdata **ref, ddsrt_iovec_t *iov)
{
  if (ddsi_serdata_size(sd) != (uint32_t)BULK_CDR_SIZE)
    return 0;
  if ((*ref = ddsi_serdata_to_ser_ref(sd, 0, (size_t)BULK_CDR_SIZE, iov)) == NULL)
    return 0;
  const unsigned char *at = iov->iov_base;
  if (iov->iov_len != (size_t)BULK_CDR_SIZE || at[0] != 0x00 || (at[1] != 0x01 && at[1] != 0x07))
  {
    ddsi_serdata_to_ser_unref(*ref, iov);
    return 0;
  }
  *h = (bulk_head_t){.transfer = get_le(at + 4, 8), .index = (uint32_t)get_le(at + 12, 4),
                     .count = (uint32_t)get_le(at + 16, 4), .offset = get_le(at + 20, 8),
                     .total = get_le(at + 28, 8), .length = (uint32_t)get_le(at + 36, 4)};
  *data = at + BULK_CDR_HEAD;
  return 1;
}

/* One taken block placed from its serialized form (bulk_cdr_view), or deserialized into the
 * receive's scratch block first when it is not little-endian (rx->lock held). */
static void bulk_rx_place_cdr(bulk_rx_t *rx, struct ddsi_serdata *sd)
{
  bulk_head_t h;
  const unsigned char *data;
  struct ddsi_serdata *ref;
  ddsrt_iovec_t iov;
  if (bulk_cdr_view(sd, &h, &data, &ref, &iov))
  {
    bulk_place(&h, data, rx->transfer, rx->out, rx->total, &rx->seen, &rx->count, &rx->t);
    ddsi_serdata_to_ser_unref(ref, &iov);
    return;
  }
  if (rx->scratch == NULL && (rx->scratch = malloc(sizeof(*rx->scratch))) == NULL)
  {
    rx->t.bad++;
    return;
  }
  if (!ddsi_serdata_to_sample(sd, rx->scratch, NULL, NULL))
  {
    rx->t.bad++;
    return;
  }
  h = bulk_head_of(rx->scratch);
  bulk_place(&h, rx->scratch->data, rx->transfer, rx->out, rx->total, &rx->seen, &rx->count,
             &rx->t);
}

/* Take what the reader holds of the receive in progress (rx->lock held): the instance's
 * blocks, or every block when the receive names only a transfer id. Over the network a block
 * is taken serialized and its data copied from there into the buffer: a taken sample would be a
 * copy of the serialized one, so this is one block-sized copy fewer (256 MiB transfers one way
 * on one host, three runs each: 0.33-0.37 CPU-seconds a GB in the receiver taking samples,
 * 0.31 taking them serialized). On `shm` blocks are taken as loans, read in place. */
static void bulk_rx_drain(bulk_rx_t *rx)
{
  void *samples[BULK_TAKE];
  struct ddsi_serdata *sds[BULK_TAKE];
  dds_sample_info_t infos[BULK_TAKE];
  dds_return_t n = BULK_TAKE;
  while (n == BULK_TAKE && rx->error == 0)
  {
    samples[0] = NULL; /* loans */
    if (rx->cdr)
      n = rx->instance != 0 ? dds_takecdr_instance(rx->reader, sds, BULK_TAKE, infos,
                                                   rx->instance, DDS_ANY_STATE)
                            : dds_takecdr(rx->reader, sds, BULK_TAKE, infos, DDS_ANY_STATE);
    else
      n = rx->instance != 0
              ? dds_take_instance(rx->reader, samples, infos, BULK_TAKE, BULK_TAKE, rx->instance)
              : dds_take(rx->reader, samples, infos, BULK_TAKE, BULK_TAKE);
    if (n == DDS_RETCODE_PRECONDITION_NOT_MET || n == DDS_RETCODE_BAD_PARAMETER)
      n = 0; /* the instance is not (or no longer) in the cache: its blocks are to come */
    if (n < 0)
      rx->error = n;
    for (dds_return_t i = 0; i < n; i++)
    {
      if (rx->cdr)
      {
        if (infos[i].valid_data)
          bulk_rx_place_cdr(rx, sds[i]);
        ddsi_serdata_unref(sds[i]);
      }
      else if (infos[i].valid_data)
      {
        bulk_head_t h = bulk_head_of(samples[i]);
        bulk_place(&h, ((const mcc_BulkBlock *)samples[i])->data, rx->transfer, rx->out,
                   rx->total, &rx->seen, &rx->count, &rx->t);
      }
    }
    if (n > 0 && !rx->cdr)
      dds_return_loan(rx->reader, samples, n);
  }
  /* The receiving thread is woken when the transfer is whole or taking failed; its idle
   * timeout sees the progress in the tally. */
  if (!bulk_rx_waiting(rx))
    pthread_cond_signal(&rx->cond);
}

static void bulk_on_data(dds_entity_t reader, void *arg)
{
  bulk_rx_t *rx = arg;
  (void)reader;
  pthread_mutex_lock(&rx->lock);
  if (rx->active) /* between receives the blocks wait in the reader's cache */
    bulk_rx_drain(rx);
  pthread_mutex_unlock(&rx->lock);
}

/* A bulk reader with its receive state and listener; the entity, or a retcode. */
static dds_entity_t bulk_reader(dds_entity_t parent, dds_entity_t topic, const dds_qos_t *qos)
{
  bulk_rx_t *rx = calloc(1, sizeof(*rx));
  if (rx == NULL)
    return DDS_RETCODE_OUT_OF_RESOURCES;
  pthread_mutex_init(&rx->lock, NULL);
  pthread_condattr_t attr;
  pthread_condattr_init(&attr);
  pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
  pthread_cond_init(&rx->cond, &attr);
  pthread_condattr_destroy(&attr);
  dds_listener_t *listener = dds_create_listener(rx);
  dds_lset_data_available(listener, bulk_on_data);
  dds_entity_t reader = dds_create_reader(parent, topic, qos, listener);
  dds_delete_listener(listener);
  if (reader < 0)
  {
    bulk_rx_free(rx);
    return reader;
  }
  rx->reader = reader;
  rx->cdr = !dds_is_shared_memory_available(reader);
  pthread_mutex_lock(&bulk_rx_registry_lock);
  rx->next = bulk_rx_registry;
  bulk_rx_registry = rx;
  pthread_mutex_unlock(&bulk_rx_registry_lock);
  return reader;
}

/* After its reader was deleted (no listener runs any more): a bulk reader's state freed, or,
 * during a receive, handed to that receive to free (it returns DDS_RETCODE_ALREADY_DELETED). */
static void bulk_rx_forget(dds_entity_t reader)
{
  pthread_mutex_lock(&bulk_rx_registry_lock);
  bulk_rx_t *rx = bulk_rx_find(reader, 1);
  int free_now = 0;
  if (rx != NULL)
  {
    pthread_mutex_lock(&rx->lock);
    if (rx->active)
    {
      rx->orphan = 1;
      rx->error = DDS_RETCODE_ALREADY_DELETED;
      pthread_cond_signal(&rx->cond);
    }
    else
      free_now = 1;
    pthread_mutex_unlock(&rx->lock);
  }
  pthread_mutex_unlock(&bulk_rx_registry_lock);
  if (free_now)
    bulk_rx_free(rx);
}

/* receive_bulk(reader, transfer, out, idle_ns, instance=0) -> (received_bytes, blocks, stray,
 * bad, duplicate, retcode): takes the blocks of `transfer` (only those of the reader's
 * instance `instance` when it is not 0: what peek_bulk said; others stay for later) into the
 * writable buffer `out` (the transfer's size) until all arrived, or DDS_RETCODE_TIMEOUT when
 * none came for idle_ns. Blocks of other transfers (stray), not fitting (bad) and repeated
 * blocks are taken, counted and dropped. With out None, the transfer's blocks are taken and
 * dropped (counted as received) until none came for idle_ns: a transfer refused. One receive
 * at a time per reader (another one meanwhile: DDS_RETCODE_PRECONDITION_NOT_MET). */
static PyObject *native_receive_bulk(PyObject *self, PyObject *args)
{
  int reader;
  unsigned long long transfer;
  PyObject *out_obj;
  Py_buffer out = {0};
  long long idle_ns;
  unsigned long long instance = 0;
  (void)self;
  if (!PyArg_ParseTuple(args, "iKOL|K", &reader, &transfer, &out_obj, &idle_ns, &instance))
    return NULL;
  int discard = out_obj == Py_None;
  if (!discard && PyObject_GetBuffer(out_obj, &out, PyBUF_WRITABLE) < 0)
    return NULL;
  bulk_tally_t t = {0};
  dds_return_t ret = 0;
  int orphan = 0;
  Py_BEGIN_ALLOW_THREADS
  /* found and claimed under the registry's lock, so that it is not freed meanwhile */
  pthread_mutex_lock(&bulk_rx_registry_lock);
  bulk_rx_t *rx = bulk_rx_find(reader, 0);
  if (rx != NULL)
    pthread_mutex_lock(&rx->lock);
  pthread_mutex_unlock(&bulk_rx_registry_lock);
  if (rx == NULL)
    ret = DDS_RETCODE_BAD_PARAMETER; /* not a bulk reader, or deleted */
  else if (rx->active)
    ret = DDS_RETCODE_PRECONDITION_NOT_MET;
  else
  {
    rx->active = 1;
    rx->discard = discard;
    rx->transfer = transfer;
    rx->instance = (dds_instance_handle_t)instance;
    rx->out = discard ? NULL : out.buf;
    rx->total = (uint64_t)out.len;
    rx->seen = NULL;
    rx->count = 0;
    rx->error = 0;
    memset(&rx->t, 0, sizeof(rx->t));
    bulk_rx_drain(rx); /* what came before this call */
    /* idle: no block taken between two deadlines, each idle_ns after progress was seen */
    Py_ssize_t taken = -1;
    struct timespec until;
    while (bulk_rx_waiting(rx))
    {
      if (bulk_rx_taken(rx) != taken)
      {
        taken = bulk_rx_taken(rx);
        clock_gettime(CLOCK_MONOTONIC, &until);
        long long ns = (long long)until.tv_nsec + idle_ns % 1000000000LL;
        until.tv_sec += (time_t)(idle_ns / 1000000000LL + ns / 1000000000LL);
        until.tv_nsec = (long)(ns % 1000000000LL);
      }
      if (pthread_cond_timedwait(&rx->cond, &rx->lock, &until) == ETIMEDOUT &&
          bulk_rx_taken(rx) == taken)
      {
        ret = discard ? 0 : DDS_RETCODE_TIMEOUT;
        break;
      }
    }
    if (rx->error != 0)
      ret = rx->error;
    t = rx->t;
    free(rx->seen);
    rx->seen = NULL;
    rx->out = NULL;
    rx->active = 0;
    orphan = rx->orphan;
  }
  if (rx != NULL)
    pthread_mutex_unlock(&rx->lock);
  if (orphan)
    bulk_rx_free(rx);
  Py_END_ALLOW_THREADS
  if (!discard)
    PyBuffer_Release(&out);
  return Py_BuildValue("(nnnnni)", t.received, t.blocks, t.stray, t.bad, t.duplicate,
                       ret < 0 ? (int)ret : 0);
}

/* peek_bulk(reader, timeout_ns) -> (transfer, total, count, bad, instance) | retcode: the
 * header of the first block in the reader's cache, left there (what a receiver needs to size
 * its buffer), and the reader's instance handle of its transfer; blocks before it that fit no
 * transfer are taken and counted. */
static PyObject *native_peek_bulk(PyObject *self, PyObject *args)
{
  int reader;
  long long timeout_ns;
  (void)self;
  if (!PyArg_ParseTuple(args, "iL", &reader, &timeout_ns))
    return NULL;
  mcc_BulkBlock head = {0};
  dds_instance_handle_t instance = 0;
  Py_ssize_t bad = 0;
  dds_return_t ret;
  Py_BEGIN_ALLOW_THREADS
  dds_entity_t ws = dds_create_waitset(dds_get_participant(reader));
  dds_entity_t cond = ws < 0 ? ws : dds_create_readcondition(reader, DDS_ANY_STATE);
  ret = cond < 0 ? cond : dds_waitset_attach(ws, cond, 0);
  dds_time_t give_up = dds_time() + (dds_duration_t)timeout_ns;
  while (ret >= 0)
  {
    void *sample = NULL;
    dds_sample_info_t si;
    dds_return_t n = dds_read(reader, &sample, &si, 1, 1);
    if (n > 0)
    {
      bulk_head_t b = bulk_head_of(sample);
      int ok = si.valid_data && bulk_fits(&b, 0, 0);
      if (ok)
      {
        head.transfer = b.transfer;
        head.total = b.total;
        head.count = b.count;
        instance = si.instance_handle;
      }
      dds_return_loan(reader, &sample, 1);
      if (ok)
        break;
      bad += si.valid_data;
      sample = NULL;
      n = dds_take(reader, &sample, &si, 1, 1); /* the same, first sample */
      if (n > 0)
        dds_return_loan(reader, &sample, n);
      continue;
    }
    if (n < 0)
      ret = n;
    else
    {
      dds_time_t now = dds_time();
      dds_return_t w = now >= give_up ? 0 : dds_waitset_wait(ws, NULL, 0, give_up - now);
      ret = w < 0 ? w : (w == 0 ? DDS_RETCODE_TIMEOUT : 0);
    }
  }
  if (ws >= 0)
    dds_delete(ws);
  if (cond >= 0)
    dds_delete(cond);
  Py_END_ALLOW_THREADS
  if (ret < 0)
    return PyLong_FromLong((long)ret);
  return Py_BuildValue("(KKInK)", (unsigned long long)head.transfer,
                       (unsigned long long)head.total, (unsigned int)head.count, bad,
                       (unsigned long long)instance);
}

/* matched_count(endpoint, of_writer) -> the number of readers a writer (of_writer true) or
 * writers a reader matches now | retcode: from the endpoint's matched status, not the matched
 * list (see matched_snapshot). */
static PyObject *native_matched_count(PyObject *self, PyObject *args)
{
  int entity, of_writer;
  (void)self;
  if (!PyArg_ParseTuple(args, "ip", &entity, &of_writer))
    return NULL;
  dds_return_t ret;
  uint32_t count = 0;
  if (of_writer)
  {
    dds_publication_matched_status_t st;
    ret = dds_get_publication_matched_status(entity, &st);
    count = st.current_count;
  }
  else
  {
    dds_subscription_matched_status_t st;
    ret = dds_get_subscription_matched_status(entity, &st);
    count = st.current_count;
  }
  return PyLong_FromLong(ret < 0 ? (long)ret : (long)count);
}

/* delete(entity) -> retcode: an entity made here, and its children. */
static PyObject *native_delete(PyObject *self, PyObject *args)
{
  int entity;
  dds_return_t ret;
  (void)self;
  if (!PyArg_ParseTuple(args, "i", &entity))
    return NULL;
  Py_BEGIN_ALLOW_THREADS
  ret = dds_delete(entity);
  bulk_rx_forget(entity); /* a bulk reader's receive state, once its listener cannot run */
  Py_END_ALLOW_THREADS
  return PyLong_FromLong((long)ret);
}

/* shm_available(entity) -> bool: whether the endpoint exchanges through shared memory. */
static PyObject *native_shm_available(PyObject *self, PyObject *args)
{
  int entity;
  (void)self;
  if (!PyArg_ParseTuple(args, "i", &entity))
    return NULL;
  return PyBool_FromLong(dds_is_shared_memory_available(entity));
}

/* Discovery introspection, race-free. Written here because cyclonedds-python's matched-endpoint
 * calls ask Cyclone for a count, allocate that many handles, ask again and index up to the second
 * answer: a peer discovered in between makes them read past their array (IndexError), and a
 * handle that unmatched in between fails its data call. Here the handle list is read into a buffer
 * that grows until it holds the whole answer, every handle's data is fetched, and the list is read
 * again: the snapshot is returned when both lists are equal and no handle vanished, so the answer
 * is a set of endpoints that were all matched at one instant. Under churn so fast that no two reads
 * agree within MATCH_ATTEMPTS, the last read is returned without the handles that vanished. */
#define MATCH_ATTEMPTS 64

typedef struct
{
  dds_instance_handle_t handle;
  dds_builtintopic_endpoint_t *ep;
} matched_t;

static int cmp_handle(const void *a, const void *b)
{
  dds_instance_handle_t x = *(const dds_instance_handle_t *)a, y = *(const dds_instance_handle_t *)b;
  return x < y ? -1 : x > y;
}

static dds_return_t matched_handles(dds_entity_t entity, int of_writer, dds_instance_handle_t **buf,
                                    size_t *cap)
{
  for (;;)
  {
    dds_return_t n = of_writer ? dds_get_matched_subscriptions(entity, *buf, *cap)
                               : dds_get_matched_publications(entity, *buf, *cap);
    if (n < 0 || (size_t)n <= *cap)
    {
      if (n > 1)
        qsort(*buf, (size_t)n, sizeof(**buf), cmp_handle);
      return n;
    }
    size_t want = (size_t)n + 16;
    dds_instance_handle_t *grown = realloc(*buf, want * sizeof(**buf));
    if (grown == NULL)
      return DDS_RETCODE_OUT_OF_RESOURCES;
    *buf = grown;
    *cap = want;
  }
}

static dds_builtintopic_endpoint_t *matched_data(dds_entity_t entity, int of_writer,
                                                 dds_instance_handle_t h)
{
  return of_writer ? dds_get_matched_subscription_data(entity, h)
                   : dds_get_matched_publication_data(entity, h);
}

static void free_matched(matched_t *m, dds_return_t n)
{
  for (dds_return_t i = 0; i < n; i++)
    if (m[i].ep != NULL)
      dds_builtintopic_free_endpoint(m[i].ep);
}

/* Runs without the GIL. On success *out holds n entries (ep NULL for a handle that vanished, only
 * after MATCH_ATTEMPTS disagreeing reads); the caller frees them with free_matched and free. */
static dds_return_t matched_snapshot(dds_entity_t entity, int of_writer, matched_t **out)
{
  size_t cap1 = 16, cap2 = 16;
  dds_instance_handle_t *a = malloc(cap1 * sizeof(*a)), *b = malloc(cap2 * sizeof(*b));
  matched_t *m = NULL;
  dds_return_t n = DDS_RETCODE_OUT_OF_RESOURCES;
  if (a == NULL || b == NULL)
    goto done;
  for (int attempt = 0; attempt < MATCH_ATTEMPTS; attempt++)
  {
    n = matched_handles(entity, of_writer, &a, &cap1);
    if (n < 0)
      goto done;
    free(m);
    m = calloc((size_t)(n ? n : 1), sizeof(*m));
    if (m == NULL)
    {
      n = DDS_RETCODE_OUT_OF_RESOURCES;
      goto done;
    }
    int vanished = 0;
    for (dds_return_t i = 0; i < n; i++)
    {
      m[i].handle = a[i];
      m[i].ep = matched_data(entity, of_writer, a[i]);
      vanished |= m[i].ep == NULL;
    }
    if (attempt == MATCH_ATTEMPTS - 1)
      break; /* churn never settled: the last read, vanished handles left out by the caller */
    dds_return_t n2 = matched_handles(entity, of_writer, &b, &cap2);
    if (!vanished && n2 == n && (n == 0 || memcmp(a, b, (size_t)n * sizeof(*a)) == 0))
      break;
    free_matched(m, n);
    if (n2 < 0)
    {
      n = n2;
      goto done;
    }
  }
done:
  free(a);
  free(b);
  if (n < 0)
  {
    free(m);
    m = NULL;
  }
  *out = m;
  return n;
}

static PyObject *endpoint_tuple(dds_instance_handle_t handle, const dds_builtintopic_endpoint_t *ep)
{
  PyObject *partitions;
  uint32_t np = 0;
  char **ps = NULL;
  if (ep->qos != NULL && dds_qget_partition(ep->qos, &np, &ps))
  {
    partitions = PyTuple_New((Py_ssize_t)np);
    for (uint32_t i = 0; i < np; i++)
    {
      /* a remote peer's partition names may be any bytes: never fail on them */
      PyObject *name = partitions ? PyUnicode_DecodeUTF8(ps[i], (Py_ssize_t)strlen(ps[i]), "replace")
                                  : NULL;
      if (name == NULL)
        Py_CLEAR(partitions);
      else
        PyTuple_SET_ITEM(partitions, i, name);
    }
    for (uint32_t i = 0; i < np; i++)
      dds_free(ps[i]);
    dds_free(ps);
    if (partitions == NULL)
      return NULL;
  }
  else
  {
    partitions = Py_NewRef(Py_None);
  }
  dds_durability_kind_t durability = DDS_DURABILITY_VOLATILE;
  if (ep->qos != NULL)
    (void)dds_qget_durability(ep->qos, &durability);
  const char *topic = ep->topic_name ? ep->topic_name : "", *type = ep->type_name ? ep->type_name : "";
  return Py_BuildValue("(Ky#y#Ns#s#i)", (unsigned long long)handle, (const char *)ep->key.v,
                       (Py_ssize_t)sizeof(ep->key.v), (const char *)ep->participant_key.v,
                       (Py_ssize_t)sizeof(ep->participant_key.v), partitions, topic,
                       (Py_ssize_t)strlen(topic), type, (Py_ssize_t)strlen(type), (int)durability);
}

static PyObject *native_matched(PyObject *self, PyObject *args)
{
  int entity, of_writer;
  (void)self;
  if (!PyArg_ParseTuple(args, "ip", &entity, &of_writer))
    return NULL;
  matched_t *m;
  dds_return_t n;
  Py_BEGIN_ALLOW_THREADS
  n = matched_snapshot(entity, of_writer, &m);
  Py_END_ALLOW_THREADS
  if (n < 0)
    return PyLong_FromLong((long)n);
  PyObject *list = PyList_New(0);
  for (dds_return_t i = 0; list != NULL && i < n; i++)
  {
    if (m[i].ep == NULL)
      continue;
    PyObject *item = endpoint_tuple(m[i].handle, m[i].ep);
    if (item == NULL || PyList_Append(list, item) < 0)
      Py_CLEAR(list);
    Py_XDECREF(item);
  }
  free_matched(m, n);
  free(m);
  return list;
}

static PyObject *native_matched_one(PyObject *self, PyObject *args)
{
  int entity, of_writer;
  unsigned long long handle;
  (void)self;
  if (!PyArg_ParseTuple(args, "ipK", &entity, &of_writer, &handle))
    return NULL;
  dds_builtintopic_endpoint_t *ep;
  Py_BEGIN_ALLOW_THREADS
  ep = matched_data(entity, of_writer, (dds_instance_handle_t)handle);
  Py_END_ALLOW_THREADS
  if (ep == NULL)
    Py_RETURN_NONE;
  PyObject *item = endpoint_tuple((dds_instance_handle_t)handle, ep);
  dds_builtintopic_free_endpoint(ep);
  return item;
}

static PyObject *native_library_features(PyObject *self, PyObject *unused)
{
  (void)self;
  (void)unused;
  return Py_BuildValue("{s:s,s:O,s:O}", "version", DDS_VERSION,
#ifdef DDS_HAS_SECURITY
                       "security", Py_True,
#else
                       "security", Py_False,
#endif
#ifdef DDS_HAS_TCP
                       "tcp", Py_True
#else
                       "tcp", Py_False
#endif
  );
}

/* Handlers on Cyclone's receive thread. set_on_data(reader, callback) -> retcode installs a
 * data-available listener that calls callback() (no arguments) on the thread that delivered
 * the data: Cyclone's receive thread for a remote writer, the writing thread for a local one.
 * No thread wakes to serve it, which is the lowest latency there is (Cyclone's ddsperf echoes
 * the same way); the callback runs with the GIL, so it must be short and must not wait for
 * other samples: while it runs, this participant receives nothing. callback None removes the
 * listener; either way the previous callback's reference is dropped once no call of it is in
 * progress (dds_set_listener waits for one), so never call this from inside the callback.
 * Every Cyclone call here runs with the GIL released: a receive thread waiting for the GIL
 * never stalls a Python thread that is waiting on Cyclone. */
static void on_data_available(dds_entity_t reader, void *arg)
{
  (void)reader;
  if (_Py_IsFinalizing())
    return;
  if (PyGILState_GetThisThreadState() == NULL)
  {
    /* A thread Python has not seen: its thread state is made once and kept (this Ensure is
     * never released), so each call below only takes and gives back the GIL. */
    PyGILState_Ensure();
    PyEval_SaveThread();
  }
  PyGILState_STATE gil = PyGILState_Ensure();
  PyObject *result = PyObject_CallNoArgs((PyObject *)arg);
  if (result == NULL)
    PyErr_WriteUnraisable((PyObject *)arg);
  Py_XDECREF(result);
  PyGILState_Release(gil);
}

static PyObject *native_set_on_data(PyObject *self, PyObject *args)
{
  int reader;
  PyObject *callback;
  (void)self;
  if (!PyArg_ParseTuple(args, "iO", &reader, &callback))
    return NULL;
  if (callback != Py_None && !PyCallable_Check(callback))
  {
    PyErr_SetString(PyExc_TypeError, "set_on_data: callback must be callable or None");
    return NULL;
  }
  dds_listener_t *lst = dds_create_listener(NULL);
  dds_listener_t *prev = dds_create_listener(NULL);
  if (lst == NULL || prev == NULL)
  {
    dds_delete_listener(lst);
    dds_delete_listener(prev);
    return PyErr_NoMemory();
  }
  if (callback != Py_None)
  {
    Py_INCREF(callback);
    dds_lset_data_available_arg(lst, on_data_available, callback, true);
  }
  void *old = NULL;
  dds_return_t ret;
  Py_BEGIN_ALLOW_THREADS
  ret = dds_get_listener(reader, prev);
  if (ret >= 0)
  {
    dds_on_data_available_fn fn = 0;
    if (dds_lget_data_available_arg(prev, &fn, &old, NULL) < 0 || fn != on_data_available)
      old = NULL;
    ret = dds_set_listener(reader, lst);
  }
  if (ret >= 0 && callback != Py_None)
  {
    uint32_t mask = 0;
    ret = dds_get_status_mask(reader, &mask);
    if (ret >= 0)
      ret = dds_set_status_mask(reader, mask | DDS_DATA_AVAILABLE_STATUS);
  }
  Py_END_ALLOW_THREADS
  dds_delete_listener(lst);
  dds_delete_listener(prev);
  if (ret < 0 && callback != Py_None)
  {
    /* The listener may be installed with the mask refused: take it off again. */
    Py_BEGIN_ALLOW_THREADS
    (void)dds_set_listener(reader, NULL);
    Py_END_ALLOW_THREADS
    Py_DECREF(callback);
  }
  Py_XDECREF((PyObject *)old);
  return PyLong_FromLong((long)ret);
}

static PyMethodDef methods[] = {
    {"write", (PyCFunction)(void (*)(void))native_write, METH_VARARGS | METH_KEYWORDS,
     "write(writer, data, timestamp_ns=-1, dispose=False) -> retcode"},
    {"write_many", native_write_many, METH_VARARGS,
     "write_many(writer, samples) -> (written, retcode)"},
    {"after_fork", native_after_fork, METH_NOARGS,
     "after_fork(): give a forked child its own sequence of Cyclone's random numbers"},
    {"flush", native_flush, METH_VARARGS,
     "flush(writer) -> retcode: send what the writer batched"},
    {"attach", native_attach, METH_VARARGS,
     "attach(waitset, entity) -> retcode: wait() reports the entity's handle when it triggers"},
    {"detach", native_detach, METH_VARARGS, "detach(waitset, entity) -> retcode"},
    {"wait", native_wait, METH_VARARGS,
     "wait(waitset, timeout_ns) -> list of triggered entity handles | retcode"},
    {"take", native_take, METH_VARARGS,
     "take(reader, mask, max_samples, layout=None) -> list[(bytes, SampleInfo) | sample] | "
     "retcode"},
    {"read", native_read, METH_VARARGS,
     "read(reader, mask, max_samples, layout=None) -> list[(bytes, SampleInfo) | sample] | "
     "retcode"},
    {"flat_layout", native_flat_layout, METH_VARARGS,
     "flat_layout(cls, appendable, kind2, fields) -> layout for take/read"},
    {"encode_flat", native_encode_flat, METH_VARARGS,
     "encode_flat(layout, sample, xcdr2) -> bytes | None"},
    {"write_flat", native_write_flat, METH_VARARGS,
     "write_flat(writer, layout, sample, xcdr2, dispose=False) -> retcode | None"},
    {"matched", native_matched, METH_VARARGS,
     "matched(entity, of_writer) -> list[(handle, key, participant_key, partitions, topic_name, "
     "type_name, durability)] | retcode"},
    {"matched_one", native_matched_one, METH_VARARGS,
     "matched_one(entity, of_writer, handle) -> the same tuple | None"},
    {"library_features", native_library_features, METH_NOARGS,
     "library_features() -> dict"},
    {"set_on_data", native_set_on_data, METH_VARARGS,
     "set_on_data(reader, callback | None) -> retcode: callback() on Cyclone's receive thread"},
    {"bulk_endpoint", native_bulk_endpoint, METH_VARARGS,
     "bulk_endpoint(parent, topic_name, qos_address, is_writer) -> entity | retcode"},
    {"send_bulk", native_send_bulk, METH_VARARGS,
     "send_bulk(writer, transfer, buffer, patience_ns) -> (sent_bytes, retcode)"},
    {"receive_bulk", native_receive_bulk, METH_VARARGS,
     "receive_bulk(reader, transfer, out, idle_ns, instance=0) -> (received_bytes, blocks, "
     "stray, bad, duplicate, retcode)"},
    {"delete", native_delete, METH_VARARGS, "delete(entity) -> retcode"},
    {"matched_count", native_matched_count, METH_VARARGS,
     "matched_count(endpoint, of_writer) -> matched peers now | retcode"},
    {"shm_available", native_shm_available, METH_VARARGS,
     "shm_available(entity) -> bool: the endpoint exchanges through shared memory"},
    {"peek_bulk", native_peek_bulk, METH_VARARGS,
     "peek_bulk(reader, timeout_ns) -> (transfer, total, count, bad, instance) | retcode"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_native",
                                    "The bus's native boundary over Cyclone DDS.", -1, methods};

PyMODINIT_FUNC PyInit__native(void)
{
  if (PyType_Ready(&SampleInfoType) < 0)
    return NULL;
  if (empty_args == NULL && (empty_args = PyTuple_New(0)) == NULL)
    return NULL;
  PyObject *m = PyModule_Create(&module);
  if (m == NULL)
    return NULL;
  if (PyModule_AddStringConstant(m, "LIBRARY", cyclone_library()) < 0)
  {
    Py_DECREF(m);
    return NULL;
  }
  Py_INCREF(&SampleInfoType);
  if (PyModule_AddObject(m, "SampleInfo", (PyObject *)&SampleInfoType) < 0)
  {
    Py_DECREF(&SampleInfoType);
    Py_DECREF(m);
    return NULL;
  }
  return m;
}
