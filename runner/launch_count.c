/* Kernel launches counted by the CUDA driver's own tool interface, for the judge.

   Loaded into a worker by the driver itself (CUDA_INJECTION64_PATH names this library; the
   driver calls InitializeInjection during cuInit, before any generated code has run). It
   subscribes to CUPTI's callbacks on the driver's launch functions and counts every launch by
   kernel name into a shared page the judge created and reads (runner.launch_count): the worker's
   Python never reports a count. The page's fd is closed once mapped.

   The callbacks cost every launch some microseconds, so they start off and the worker turns
   them on for its checked calls only (kernelbot_count_launches), never for timed ones. Code that
   turned them off could only make its own checked calls fail: the judge requires a launch.

   CUPTI is the interface NVIDIA's own profilers (Nsight Systems) inject the same way; the
   headers and libcupti are the ones Triton ships for its profiler, so a runner needs nothing
   Triton does not already bring. */
#define _GNU_SOURCE
#include <cupti.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define KB_MAGIC 0x6b626c61756e6368ULL /* "kblaunch" */
#define KB_SLOTS 64
#define KB_NAME 120

typedef struct {
  uint64_t count;
  char name[KB_NAME];
} kb_slot;

/* The layout runner/launch_count.py reads: keep the two in step. */
typedef struct {
  uint64_t magic;
  uint64_t total;    /* every launch, named or not */
  uint64_t overflow; /* launches of kernels past the last slot */
  uint32_t used;
  uint32_t error;    /* the CUPTI result that stopped the subscription, 0 when counting */
  kb_slot slots[KB_SLOTS];
} kb_page;

static kb_page *page;
static CUpti_SubscriberHandle subscriber;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static const CUpti_CallbackId LAUNCHES[] = {
    CUPTI_DRIVER_TRACE_CBID_cuLaunch,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchGrid,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchGridAsync,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch,
    CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch_ptsz,
};

static void count(const char *name) {
  __atomic_add_fetch(&page->total, 1, __ATOMIC_RELAXED);
  if (name == NULL || name[0] == '\0')
    name = "<unnamed>";
  pthread_mutex_lock(&lock);
  uint32_t i = 0;
  while (i < page->used && strncmp(page->slots[i].name, name, KB_NAME - 1) != 0)
    i++;
  if (i == page->used && i < KB_SLOTS) {
    strncpy(page->slots[i].name, name, KB_NAME - 1);
    __atomic_store_n(&page->used, i + 1, __ATOMIC_RELEASE);
  }
  if (i < KB_SLOTS)
    __atomic_add_fetch(&page->slots[i].count, 1, __ATOMIC_RELEASE);
  else
    __atomic_add_fetch(&page->overflow, 1, __ATOMIC_RELAXED);
  pthread_mutex_unlock(&lock);
}

static void CUPTIAPI on_api(void *user, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                            const void *data) {
  const CUpti_CallbackData *info = (const CUpti_CallbackData *)data;
  (void)user;
  (void)domain;
  if (info->callbackSite != CUPTI_API_ENTER)
    return;
  if (cbid == CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch || cbid == CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch_ptsz)
    count("<cuda graph>");
  else
    count(info->symbolName);
}

/* Turn the launch callbacks on (1) or off (0); the CUPTI result, 0 on success. */
int kernelbot_count_launches(int on) {
  if (page == NULL)
    return -1;
  CUptiResult res = CUPTI_SUCCESS;
  for (size_t i = 0; res == CUPTI_SUCCESS && i < sizeof(LAUNCHES) / sizeof(LAUNCHES[0]); i++)
    res = cuptiEnableCallback(on ? 1 : 0, subscriber, CUPTI_CB_DOMAIN_DRIVER_API, LAUNCHES[i]);
  if (res != CUPTI_SUCCESS)
    page->error = (uint32_t)res;
  return (int)res;
}

int InitializeInjection(void) {
  const char *fd_text = getenv("KERNELBOT_LAUNCH_FD");
  if (fd_text == NULL)
    return 1;
  int fd = atoi(fd_text);
  /* Only the judge's page: a memfd of its size (a child of the worker inherits the variable,
     not the fd, and the number may name some other file there). */
  struct stat st;
  if (fcntl(fd, F_GET_SEALS) < 0 || fstat(fd, &st) != 0 || st.st_size != (off_t)sizeof(kb_page))
    return 1;
  void *mapped = mmap(NULL, sizeof(kb_page), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (mapped == MAP_FAILED)
    return 1;
  kb_page *shared = (kb_page *)mapped;
  CUptiResult res = cuptiSubscribe(&subscriber, (CUpti_CallbackFunc)on_api, NULL);
  shared->error = (uint32_t)res;
  if (res == CUPTI_SUCCESS)
    page = shared;
  __atomic_store_n(&shared->magic, KB_MAGIC, __ATOMIC_RELEASE);
  return 1;
}
