/*
 * mcc-c-peer: an MCC radar and launcher written against Cyclone DDS's C API (0.10 and later).
 *
 *   mcc-c-peer radar    [--sensor-id ID] [--position X,Y,Z] [--period-s S] [--targets N]
 *                       [--seed N] [--duration-s S] [--iff-friends N]
 *                       (--iff-friends: the radar interrogates IFF; its first N targets answer
 *                       IFF_FRIEND, the others IFF_NO_REPLY; without it `iff` stays empty)
 *   mcc-c-peer echo     (PerfSample from PerfPing back on PerfPong until seq 0: the latency
 *                       bench's peer, `mcc bench latency --peer cyclone-c`)
 *   mcc-c-peer launcher [--weapon-id ID] [--position X,Y,Z] [--rounds N] [--min-range-m M]
 *                       [--max-range-m M] [--flight-s S] [--status-period-s S] [--duration-s S]
 *
 * The types come from idl/mcc.idl through idlc at build time, so the C and Python peers share
 * one data model; the wire (XTypes type information, appendable types in XCDR2) is what makes
 * a Cyclone 0.10 C process and a Cyclone 11 Python process understand each other.
 *
 * Environment: MCC_DOMAIN (DDS domain, default 0), MCC_PARTITIONS (comma-separated DDS
 * partitions, as mcc.bus), CYCLONEDDS_URI (transport and discovery tag, as written by
 * mcc.bus.transport.Transport.apply_to_env), MCC_SYSTEM and MCC_INDEX (set by the supervisor:
 * the sourced topics DetectionBatch, EngagementOutcome and WeaponStatus are written in the
 * partition src/SYSTEM.INDEX, the only one a secured mission grants this instance's identity,
 * as mcc.bus.topics; MCC_SOURCE, when set, names it instead: SYSTEM.INDEX#GENERATION, the
 * generation of the identity issued for this start). SIGTERM or SIGINT stop it with exit status 0.
 *
 * QoS: Cyclone C 0.10 has no QoS provider, so the policies of qos/mcc.xml are set here in code:
 * profile "sensor_stream" for DetectionBatch, "state" for EngagementOrder, EngagementOutcome
 * (the launcher's answers, a topic of their own so that only TEWA may write orders) and
 * WeaponStatus.
 * tests/interop runs it next to Python readers and writers of those profiles.
 *
 * Content conventions (mcc.apps.radar, mcc.types.arrays): per-detection arrays are packed
 * little-endian float64 in sequence<octet>, IFF answers one octet each (IffAnswer values); azimuth from north, clockwise; ENU metres; times in
 * Unix nanoseconds; origin_ns is the scan time.
 */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dds/dds.h"
#include "dds/version.h"
#include "mcc.h"

#define MAX_TARGETS 64
#define MAX_PARTITIONS 16

static volatile sig_atomic_t stop_requested = 0;

static void on_signal(int sig)
{
  (void)sig;
  stop_requested = 1;
}

static int64_t now_ns(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void die(const char *what, dds_return_t rc)
{
  fprintf(stderr, "mcc-c-peer: %s: %s\n", what, dds_strretcode(rc));
  exit(1);
}

static void usage_error(const char *message, const char *value)
{
  fprintf(stderr, "mcc-c-peer: %s: %s\n", message, value ? value : "(missing)");
  fprintf(stderr, "usage: mcc-c-peer radar|launcher [options] (see the header of mcc_c_peer.c)\n");
  exit(2);
}

static double parse_double(const char *option, const char *text)
{
  char *end = NULL;
  if (text == NULL)
    usage_error(option, NULL);
  errno = 0;
  double value = strtod(text, &end);
  if (errno != 0 || end == text || *end != '\0' || !isfinite(value))
    usage_error(option, text);
  return value;
}

static void parse_position(const char *option, const char *text, double out[3])
{
  if (text == NULL || sscanf(text, "%lf,%lf,%lf", &out[0], &out[1], &out[2]) != 3)
    usage_error(option, text);
}

/* -- QoS of qos/mcc.xml, in code ------------------------------------------------------------ */

static dds_qos_t *qos_sensor_stream(void)
{
  dds_qos_t *qos = dds_create_qos();
  dds_qset_reliability(qos, DDS_RELIABILITY_BEST_EFFORT, 0);
  dds_qset_durability(qos, DDS_DURABILITY_VOLATILE);
  dds_qset_history(qos, DDS_HISTORY_KEEP_LAST, 8);
  dds_qset_deadline(qos, DDS_SECS(2));
  return qos;
}

static dds_qos_t *qos_state(void)
{
  dds_qos_t *qos = dds_create_qos();
  dds_qset_reliability(qos, DDS_RELIABILITY_RELIABLE, DDS_MSECS(100));
  dds_qset_durability(qos, DDS_DURABILITY_TRANSIENT_LOCAL);
  dds_qset_history(qos, DDS_HISTORY_KEEP_LAST, 1);
  return qos;
}

/* -- the participant, publisher and subscriber (with MCC_PARTITIONS) ------------------------ */

struct bus {
  /* source_publisher: the instance's own source partition, for sourced topics */
  dds_entity_t participant, publisher, subscriber, source_publisher;
};

static struct bus open_bus(void)
{
  struct bus bus;
  const char *domain_text = getenv("MCC_DOMAIN");
  long domain = domain_text && *domain_text ? strtol(domain_text, NULL, 10) : 0;
  if (domain < 0 || domain > 232)
    usage_error("MCC_DOMAIN must be 0..232", domain_text);
  bus.participant = dds_create_participant((dds_domainid_t)domain, NULL, NULL);
  if (bus.participant < 0)
    die("dds_create_participant (check CYCLONEDDS_URI)", bus.participant);

  dds_qos_t *qos = NULL;
  const char *partitions = getenv("MCC_PARTITIONS");
  char copy[1024];
  const char *names[MAX_PARTITIONS];
  uint32_t n = 0;
  if (partitions && *partitions) {
    snprintf(copy, sizeof copy, "%s", partitions);
    for (char *tok = strtok(copy, ","); tok && n < MAX_PARTITIONS; tok = strtok(NULL, ","))
      if (*tok)
        names[n++] = tok;
    qos = dds_create_qos();
    dds_qset_partition(qos, n, names);
  }
  bus.publisher = dds_create_publisher(bus.participant, qos, NULL);
  bus.subscriber = dds_create_subscriber(bus.participant, qos, NULL);
  if (qos)
    dds_delete_qos(qos);
  if (bus.publisher < 0)
    die("dds_create_publisher", bus.publisher);
  bus.source_publisher = bus.publisher;
  const char *system = getenv("MCC_SYSTEM"), *index = getenv("MCC_INDEX");
  const char *given = getenv("MCC_SOURCE");
  if (system && *system) {
    char source[256];
    const char *own[1] = {source};
    if (given && *given)
      snprintf(source, sizeof source, "src/%s", given);
    else
      snprintf(source, sizeof source, "src/%s.%s", system, index && *index ? index : "0");
    dds_qos_t *sqos = dds_create_qos();
    dds_qset_partition(sqos, 1, own);
    bus.source_publisher = dds_create_publisher(bus.participant, sqos, NULL);
    dds_delete_qos(sqos);
    if (bus.source_publisher < 0)
      die("dds_create_publisher (source partition)", bus.source_publisher);
  }
  if (bus.subscriber < 0)
    die("dds_create_subscriber", bus.subscriber);
  return bus;
}

static dds_entity_t make_topic(struct bus *bus, const dds_topic_descriptor_t *desc,
                               const char *name, const dds_qos_t *qos)
{
  dds_entity_t topic = dds_create_topic(bus->participant, desc, name, qos, NULL);
  if (topic < 0)
    die(name, topic);
  return topic;
}

/* -- a small seeded random source (xorshift64*, Box-Muller) --------------------------------- */

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

static double uniform01(void)
{
  rng_state ^= rng_state >> 12;
  rng_state ^= rng_state << 25;
  rng_state ^= rng_state >> 27;
  return (double)((rng_state * 2685821657736338717ull) >> 11) / 9007199254740992.0;
}

static double gauss(double sigma)
{
  double u1 = uniform01(), u2 = uniform01();
  if (u1 < 1e-300)
    u1 = 1e-300;
  return sigma * sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

/* -- radar ---------------------------------------------------------------------------------- */

struct target {
  double p[3], v[3];
};

static void pack_f64(dds_sequence_octet *seq, const double *values, uint32_t count)
{
  seq->_length = seq->_maximum = count * 8u;
  seq->_buffer = count ? dds_alloc(count * 8u) : NULL;
  seq->_release = true;
  for (uint32_t i = 0; i < count; i++) {
    uint64_t bits;
    memcpy(&bits, &values[i], 8);
    for (int b = 0; b < 8; b++) /* little-endian on the wire whatever this host is */
      seq->_buffer[i * 8u + (uint32_t)b] = (uint8_t)(bits >> (8 * b));
  }
}

static int run_radar(int argc, char **argv)
{
  const char *sensor_id = "radar-c";
  double position[3] = {0.0, -2000.0, 10.0};
  double period_s = 0.5, duration_s = 0.0;
  long n_targets = 3, seed = 7, iff_friends = -1; /* -1: no IFF interrogator */
  for (int i = 0; i < argc; i++) {
    const char *arg = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(arg, "--sensor-id") && val) sensor_id = argv[++i];
    else if (!strcmp(arg, "--position")) { parse_position(arg, val, position); i++; }
    else if (!strcmp(arg, "--period-s")) { period_s = parse_double(arg, val); i++; }
    else if (!strcmp(arg, "--duration-s")) { duration_s = parse_double(arg, val); i++; }
    else if (!strcmp(arg, "--targets")) { n_targets = (long)parse_double(arg, val); i++; }
    else if (!strcmp(arg, "--seed")) { seed = (long)parse_double(arg, val); i++; }
    else if (!strcmp(arg, "--iff-friends")) { iff_friends = (long)parse_double(arg, val); i++; }
    else usage_error("unknown radar option", arg);
  }
  if (period_s <= 0.0 || period_s > 60.0)
    usage_error("--period-s must be in (0, 60]", argv[0]);
  if (n_targets < 0 || n_targets > MAX_TARGETS)
    usage_error("--targets must be 0..64", NULL);
  if (iff_friends < -1 || iff_friends > n_targets)
    usage_error("--iff-friends must be 0..--targets", NULL);
  rng_state ^= (uint64_t)seed * 0xD1B54A32D192ED03ull;

  /* targets start 15-25 km out and fly straight at the origin (the defended asset) */
  struct target targets[MAX_TARGETS];
  for (long k = 0; k < n_targets; k++) {
    double bearing = 2.0 * M_PI * ((double)k + 0.3 * uniform01()) / (double)(n_targets ? n_targets : 1);
    double range = 15000.0 + 10000.0 * uniform01(), speed = 200.0 + 50.0 * uniform01();
    targets[k].p[0] = range * sin(bearing);
    targets[k].p[1] = range * cos(bearing);
    targets[k].p[2] = 1000.0 + 2000.0 * uniform01();
    targets[k].v[0] = -speed * sin(bearing);
    targets[k].v[1] = -speed * cos(bearing);
    targets[k].v[2] = 0.0;
  }

  struct bus bus = open_bus();
  dds_qos_t *qos = qos_sensor_stream();
  dds_entity_t topic = make_topic(&bus, &mcc_DetectionBatch_desc, "DetectionBatch", qos);
  dds_entity_t writer = dds_create_writer(bus.source_publisher, topic, qos, NULL);
  dds_delete_qos(qos);
  if (writer < 0)
    die("dds_create_writer DetectionBatch", writer);
  printf("mcc-c-peer radar %s: %ld targets, scan %.2f s, Cyclone DDS C %s\n", sensor_id,
         n_targets, period_s, DDS_VERSION);
  fflush(stdout);

  const int64_t start_ns = now_ns(), period_ns = (int64_t)(period_s * 1e9);
  for (uint64_t scan = 0; !stop_requested; scan++) {
    int64_t scan_ns = start_ns + (int64_t)scan * period_ns;
    int64_t wait_ns = scan_ns - now_ns();
    if (wait_ns > 0) {
      struct timespec ts = {(time_t)(wait_ns / 1000000000), (long)(wait_ns % 1000000000)};
      nanosleep(&ts, NULL);
      if (stop_requested)
        break;
    }
    double t = (double)(scan_ns - start_ns) * 1e-9;
    if (duration_s > 0.0 && t >= duration_s)
      break;
    double r[MAX_TARGETS], az[MAX_TARGETS], el[MAX_TARGETS], rv[MAX_TARGETS], snr[MAX_TARGETS];
    double x[MAX_TARGETS], y[MAX_TARGETS], z[MAX_TARGETS];
    uint8_t iff[MAX_TARGETS];
    uint32_t count = 0;
    for (long k = 0; k < n_targets; k++) {
      double p[3], d[3];
      for (int a = 0; a < 3; a++) {
        p[a] = targets[k].p[a] + targets[k].v[a] * t;
        d[a] = p[a] - position[a];
      }
      double ground = hypot(d[0], d[1]), range = sqrt(ground * ground + d[2] * d[2]);
      if (range < 200.0)
        continue; /* inside the radar's minimum range: not seen */
      double rr = range + gauss(15.0), aa = atan2(d[0], d[1]) + gauss(0.002);
      double ee = atan2(d[2], ground) + gauss(0.003);
      r[count] = rr;
      az[count] = aa;
      el[count] = ee;
      rv[count] = (d[0] * targets[k].v[0] + d[1] * targets[k].v[1] + d[2] * targets[k].v[2]) / range;
      snr[count] = 20.0 - 20.0 * log10(range / 10000.0);
      x[count] = position[0] + rr * cos(ee) * sin(aa);
      y[count] = position[1] + rr * cos(ee) * cos(aa);
      z[count] = position[2] + rr * sin(ee);
      iff[count] = (uint8_t)(k < iff_friends ? mcc_IFF_FRIEND : mcc_IFF_NO_REPLY);
      count++;
    }
    mcc_DetectionBatch batch;
    memset(&batch, 0, sizeof batch);
    batch.sensor_id = (char *)sensor_id;
    batch.scan_id = scan;
    batch.origin_ns = scan_ns;
    batch.sensor_x_m = position[0];
    batch.sensor_y_m = position[1];
    batch.sensor_z_m = position[2];
    batch.count = count;
    pack_f64(&batch.range_m, r, count);
    pack_f64(&batch.azimuth_rad, az, count);
    pack_f64(&batch.elevation_rad, el, count);
    pack_f64(&batch.radial_velocity_mps, rv, count);
    pack_f64(&batch.snr_db, snr, count);
    pack_f64(&batch.x_m, x, count);
    pack_f64(&batch.y_m, y, count);
    pack_f64(&batch.z_m, z, count);
    if (iff_friends >= 0 && count) { /* IffAnswer values, one octet per detection */
      batch.iff._length = batch.iff._maximum = count;
      batch.iff._buffer = dds_alloc(count);
      batch.iff._release = true;
      memcpy(batch.iff._buffer, iff, count);
    }
    batch.publish_ns = now_ns();
    dds_return_t rc = dds_write(writer, &batch);
    batch.sensor_id = NULL; /* not ours to free */
    mcc_DetectionBatch_free(&batch, DDS_FREE_CONTENTS);
    if (rc < 0)
      die("dds_write DetectionBatch", rc);
    if (scan % 20 == 0) {
      printf("radar %s: scan %llu, %u detections\n", sensor_id, (unsigned long long)scan, count);
      fflush(stdout);
    }
  }
  dds_delete(bus.participant);
  printf("radar %s: stopped\n", sensor_id);
  return 0;
}

/* -- launcher ------------------------------------------------------------------------------- */

struct engagement {
  mcc_EngagementOrder order;
  int64_t outcome_ns;
  int active;
};

static void write_status(dds_entity_t writer, mcc_WeaponStatus *status)
{
  status->update_ns = now_ns();
  dds_return_t rc = dds_write(writer, status);
  if (rc < 0)
    die("dds_write WeaponStatus", rc);
}

static int run_launcher(int argc, char **argv)
{
  const char *weapon_id = "c-sam-1";
  double position[3] = {0.0, 500.0, 0.0};
  double min_range_m = 1000.0, max_range_m = 20000.0, flight_s = 2.0, status_period_s = 1.0;
  double duration_s = 0.0;
  long rounds = 6;
  for (int i = 0; i < argc; i++) {
    const char *arg = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(arg, "--weapon-id") && val) weapon_id = argv[++i];
    else if (!strcmp(arg, "--position")) { parse_position(arg, val, position); i++; }
    else if (!strcmp(arg, "--rounds")) { rounds = (long)parse_double(arg, val); i++; }
    else if (!strcmp(arg, "--min-range-m")) { min_range_m = parse_double(arg, val); i++; }
    else if (!strcmp(arg, "--max-range-m")) { max_range_m = parse_double(arg, val); i++; }
    else if (!strcmp(arg, "--flight-s")) { flight_s = parse_double(arg, val); i++; }
    else if (!strcmp(arg, "--status-period-s")) { status_period_s = parse_double(arg, val); i++; }
    else if (!strcmp(arg, "--duration-s")) { duration_s = parse_double(arg, val); i++; }
    else usage_error("unknown launcher option", arg);
  }
  if (rounds < 1 || rounds > 1000)
    usage_error("--rounds must be 1..1000", NULL);
  if (status_period_s <= 0.0 || flight_s < 0.0)
    usage_error("--status-period-s must be > 0 and --flight-s >= 0", NULL);

  struct bus bus = open_bus();
  dds_qos_t *qos = qos_state();
  dds_entity_t order_topic = make_topic(&bus, &mcc_EngagementOrder_desc, "EngagementOrder", qos);
  dds_entity_t outcome_topic =
      make_topic(&bus, &mcc_EngagementOrder_desc, "EngagementOutcome", qos);
  dds_entity_t status_topic = make_topic(&bus, &mcc_WeaponStatus_desc, "WeaponStatus", qos);
  dds_entity_t orders = dds_create_reader(bus.subscriber, order_topic, qos, NULL);
  dds_entity_t answers = dds_create_writer(bus.source_publisher, outcome_topic, qos, NULL);
  dds_entity_t statuses = dds_create_writer(bus.source_publisher, status_topic, qos, NULL);
  dds_delete_qos(qos);
  if (orders < 0 || answers < 0 || statuses < 0)
    die("creating the launcher's readers and writers", orders < 0 ? orders : answers < 0 ? answers : statuses);
  dds_entity_t waitset = dds_create_waitset(bus.participant);
  dds_entity_t readable = dds_create_readcondition(orders, DDS_ANY_STATE);
  dds_waitset_attach(waitset, readable, readable);

  mcc_WeaponStatus status;
  memset(&status, 0, sizeof status);
  status.weapon_id = (char *)weapon_id;
  status.state = mcc_WEAPON_READY;
  status.rounds_ready = status.rounds_total = (uint32_t)rounds;
  status.x_m = position[0];
  status.y_m = position[1];
  status.z_m = position[2];
  status.min_range_m = min_range_m;
  status.max_range_m = max_range_m;
  write_status(statuses, &status);
  printf("mcc-c-peer launcher %s: %ld rounds, range %.0f-%.0f m, Cyclone DDS C %s\n", weapon_id,
         rounds, min_range_m, max_range_m, DDS_VERSION);
  fflush(stdout);

  struct engagement engagement = {.active = 0};
  const int64_t start_ns = now_ns(), status_period_ns = (int64_t)(status_period_s * 1e9);
  int64_t next_status_ns = start_ns + status_period_ns;
  while (!stop_requested) {
    if (duration_s > 0.0 && (double)(now_ns() - start_ns) * 1e-9 >= duration_s)
      break;
    dds_waitset_wait(waitset, NULL, 0, DDS_MSECS(100));
    void *samples[16] = {NULL};
    dds_sample_info_t infos[16];
    dds_return_t n = dds_take(orders, samples, infos, 16, 16);
    if (n < 0)
      die("dds_take EngagementOrder", n);
    for (dds_return_t i = 0; i < n; i++) {
      const mcc_EngagementOrder *order = samples[i];
      if (!infos[i].valid_data || order->status != mcc_ORDER_ISSUED ||
          strcmp(order->weapon_id, weapon_id) != 0)
        continue;
      printf("launcher %s: order %u for track %u, %u round(s), pk %.2f\n", weapon_id,
             order->order_id, order->track_id, order->rounds, order->pk);
      fflush(stdout);
      mcc_EngagementOrder answer = *order;
      if (engagement.active || status.state != mcc_WEAPON_READY || status.rounds_ready < order->rounds) {
        answer.status = mcc_ORDER_ABORTED; /* one engagement at a time, as the Python launcher */
      } else {
        answer.status = mcc_ORDER_IN_FLIGHT;
        engagement.order = *order;
        engagement.order.weapon_id = (char *)weapon_id;
        engagement.outcome_ns = now_ns() + (int64_t)(flight_s * 1e9);
        engagement.active = 1;
        status.state = mcc_WEAPON_ENGAGING;
        status.rounds_ready -= order->rounds;
        status.engaged_track_id = order->track_id;
        write_status(statuses, &status);
      }
      answer.weapon_id = (char *)weapon_id;
      dds_return_t rc = dds_write(answers, &answer);
      if (rc < 0)
        die("dds_write EngagementOutcome", rc);
    }
    if (n > 0)
      dds_return_loan(orders, samples, n);
    int64_t t_ns = now_ns();
    if (engagement.active && t_ns >= engagement.outcome_ns) {
      /* no Pk model here: the C launcher reports a miss, so TEWA re-engages the track */
      engagement.order.status = mcc_ORDER_MISS;
      dds_return_t rc = dds_write(answers, &engagement.order);
      if (rc < 0)
        die("dds_write EngagementOutcome", rc);
      printf("launcher %s: order %u: miss\n", weapon_id, engagement.order.order_id);
      fflush(stdout);
      engagement.active = 0;
      status.state = status.rounds_ready > 0 ? mcc_WEAPON_READY : mcc_WEAPON_OFFLINE;
      status.engaged_track_id = 0;
      write_status(statuses, &status);
    }
    if (t_ns >= next_status_ns) {
      write_status(statuses, &status);
      next_status_ns = t_ns + status_period_ns;
    }
  }
  status.state = mcc_WEAPON_OFFLINE;
  status.engaged_track_id = 0;
  write_status(statuses, &status);
  dds_delete(bus.participant);
  printf("launcher %s: stopped\n", weapon_id);
  return 0;
}

/* -- echo (mcc bench latency --peer cyclone-c) --------------------------------------------- */

static int run_echo(int argc, char **argv)
{
  for (int i = 0; i < argc; i++)
    usage_error("unknown echo option", argv[i]);
  struct bus bus = open_bus();
  dds_qos_t *qos = dds_create_qos();
  dds_qset_reliability(qos, DDS_RELIABILITY_RELIABLE, DDS_MSECS(100));
  dds_qset_durability(qos, DDS_DURABILITY_VOLATILE);
  dds_qset_history(qos, DDS_HISTORY_KEEP_LAST, 50); /* profile perf_reliable */
  dds_entity_t ping_topic = make_topic(&bus, &mcc_PerfSample_desc, "PerfPing", qos);
  dds_entity_t pong_topic = make_topic(&bus, &mcc_PerfSample_desc, "PerfPong", qos);
  dds_entity_t reader = dds_create_reader(bus.subscriber, ping_topic, qos, NULL);
  dds_entity_t writer = dds_create_writer(bus.publisher, pong_topic, qos, NULL);
  dds_delete_qos(qos);
  if (reader < 0 || writer < 0)
    die("creating the echo's reader and writer", reader < 0 ? reader : writer);
  dds_entity_t waitset = dds_create_waitset(bus.participant);
  dds_entity_t cond = dds_create_readcondition(reader, DDS_ANY_STATE);
  dds_waitset_attach(waitset, cond, 0);
  printf("mcc-c-peer echo: ready, Cyclone DDS C %s\n", DDS_VERSION);
  long echoed = 0;
  while (!stop_requested) {
    if (dds_waitset_wait(waitset, NULL, 0, DDS_MSECS(100)) <= 0)
      continue;
    void *samples[16] = {NULL};
    dds_sample_info_t infos[16];
    dds_return_t n = dds_take(reader, samples, infos, 16, 16);
    for (dds_return_t k = 0; k < n; k++) {
      const mcc_PerfSample *s = samples[k];
      if (!infos[k].valid_data)
        continue;
      if (s->seq == 0) /* the end of a run (mcc.bench.latency) */
        stop_requested = 1;
      else if (dds_write(writer, s) == 0)
        echoed++;
    }
    if (n > 0)
      dds_return_loan(reader, samples, n);
  }
  dds_delete(bus.participant);
  printf("mcc-c-peer echo: %ld samples\n", echoed);
  return 0;
}

int main(int argc, char **argv)
{
  signal(SIGTERM, on_signal);
  signal(SIGINT, on_signal);
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (argc >= 2 && !strcmp(argv[1], "radar"))
    return run_radar(argc - 2, argv + 2);
  if (argc >= 2 && !strcmp(argv[1], "launcher"))
    return run_launcher(argc - 2, argv + 2);
  if (argc >= 2 && !strcmp(argv[1], "echo"))
    return run_echo(argc - 2, argv + 2);
  usage_error("first argument must be 'radar', 'launcher' or 'echo'", argc >= 2 ? argv[1] : NULL);
  return 2;
}
